//! SORT and SORT_RO: the elements of a list, set or sorted set, sorted as numbers (the
//! default) or as strings (ALPHA), ASC or DESC, LIMIT offset count, by the values of other
//! keys (`BY weight_*`, `BY hash_*->field`) or not at all (`BY nosort`), each element or
//! the keys it names returned (`GET #`, `GET data_*`, `GET hash_*->field`), or stored as a
//! list (STORE). Redis 7.0's rules, replies and error texts.
//!
//! The keys a pattern names are found at run time. When they may live on other shards than
//! the sorted key's ([`patterns_reach_elsewhere`]), the server runs SORT as a cross-shard
//! operation: it borrows the keys [`pattern_keys`] lists and runs SORT with every key
//! here (`Shard::execute_all_here`). A pattern whose `{tag}` puts its keys on the sorted
//! key's shard runs there directly. A pattern naming a key of another shard outside that
//! path (inside MULTI or a script) is an error, never a silent miss.

use std::cmp::Ordering;

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::{int_arg, is};
use crate::ctx::Ctx;
use crate::errors::*;
use crate::keyspace::node::ValueRef;
use crate::keyspace::Entry;
use crate::values::value::Value;

const NOT_DOUBLE: &str = "ERR One or more scores can't be converted into double";
const ELSEWHERE: &str = "ERR a SORT pattern names a key on another shard: give the pattern a {hash tag} that puts its keys on the sorted key's shard";

/// SORT's options, parsed once (the request's `Form::Sort`): what the route reads (the
/// patterns, the STORE key) and what the sort does.
#[derive(Clone, Debug)]
pub struct SortArgs {
    desc: bool,
    alpha: bool,
    limit: Option<(i64, i64)>,
    store: Option<Bytes>,
    /// Where the STORE key is among the arguments.
    pub store_at: Option<usize>,
    by: Option<Bytes>,
    gets: Vec<Bytes>,
    dont_sort: bool,
}

impl SortArgs {
    /// A copy sharing no bytes with the arguments it was parsed from.
    pub fn detached(&self) -> SortArgs {
        let copy = |b: &Bytes| Bytes::copy_from_slice(b);
        SortArgs {
            store: self.store.as_ref().map(copy),
            by: self.by.as_ref().map(copy),
            gets: self.gets.iter().map(copy).collect(),
            ..self.clone()
        }
    }
}

/// Parses SORT's (or, `read_only`, SORT_RO's) options after the key.
pub fn parse(args: &[Bytes], read_only: bool) -> Result<SortArgs, Frame> {
    crate::parse_count::count_parse(crate::spec::FormKind::Sort);
    let mut o = SortArgs {
        desc: false,
        alpha: false,
        limit: None,
        store: None,
        store_at: None,
        by: None,
        gets: Vec::new(),
        dont_sort: false,
    };
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        let a = &args[j];
        if is(a, "asc") {
            o.desc = false;
        } else if is(a, "desc") {
            o.desc = true;
        } else if is(a, "alpha") {
            o.alpha = true;
        } else if is(a, "limit") && left >= 2 {
            o.limit = Some((int_arg(&args[j + 1])?, int_arg(&args[j + 2])?));
            j += 2;
        } else if !read_only && is(a, "store") && left >= 1 {
            o.store = Some(args[j + 1].clone());
            o.store_at = Some(j + 1);
            j += 1;
        } else if is(a, "by") && left >= 1 {
            o.by = Some(args[j + 1].clone());
            o.dont_sort = !args[j + 1].contains(&b'*');
            j += 1;
        } else if is(a, "get") && left >= 1 {
            o.gets.push(args[j + 1].clone());
            j += 1;
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
        j += 1;
    }
    Ok(o)
}

/// The key a pattern names for `element`, and the hash field after `->` if any; `None` for
/// `#` and for a pattern without `*` (which names nothing).
fn pattern_key<'p>(pattern: &'p [u8], element: &[u8]) -> Option<(Vec<u8>, Option<&'p [u8]>)> {
    if pattern == b"#" {
        return None;
    }
    let star = pattern.iter().position(|&b| b == b'*')?;
    let rest = &pattern[star + 1..];
    let (suffix, field) = match rest.windows(2).position(|w| w == b"->") {
        Some(at) if at + 2 < rest.len() => (&rest[..at], Some(&rest[at + 2..])),
        _ => (rest, None),
    };
    let mut key = Vec::with_capacity(pattern.len() + element.len());
    key.extend_from_slice(&pattern[..star]);
    key.extend_from_slice(element);
    key.extend_from_slice(suffix);
    Some((key, field))
}

/// The patterns of a SORT that name keys: BY (unless it sorts nothing) and every GET.
fn naming_patterns(o: &SortArgs) -> impl Iterator<Item = &Bytes> {
    o.by.iter()
        .filter(|_| !o.dont_sort)
        .chain(o.gets.iter())
        .filter(|p| p[..] != *b"#" && p.contains(&b'*'))
}

/// True when SORT's BY or GET patterns may name keys on another shard than `home`, the
/// sorted key's: a pattern whose keys all share a `{tag}` (one in the part before `*`)
/// names keys of that tag's shard; any other names keys anywhere. `shard_of` maps a key
/// to its shard. False for a malformed SORT: it runs where it is and says what is wrong.
pub fn patterns_reach_elsewhere(
    o: &SortArgs,
    home: usize,
    shard_of: impl Fn(&[u8]) -> usize,
) -> bool {
    let reaches = |pattern: &Bytes| {
        let prefix = &pattern[..pattern.iter().position(|&b| b == b'*').unwrap_or(0)];
        let tagged = prefix
            .iter()
            .position(|&b| b == b'{')
            .is_some_and(|open| prefix[open + 1..].iter().position(|&b| b == b'}') > Some(0));
        !tagged || shard_of(prefix) != home
    };
    let reached = naming_patterns(o).any(reaches);
    reached
}

/// Every key SORT's BY and GET patterns name for the elements of the sorted key now
/// (each once): what a cross-shard SORT borrows before it runs.
pub fn pattern_keys(ctx: &mut Ctx<'_>, key: &[u8], o: &SortArgs) -> Vec<Bytes> {
    let Ok(all) = elements(ctx, key, false) else {
        return Vec::new();
    };
    let mut keys = std::collections::HashSet::new();
    for pattern in naming_patterns(o) {
        for element in &all.items {
            if let Some((key, _)) = pattern_key(pattern, element) {
                keys.insert(Bytes::from(key));
            }
        }
    }
    keys.into_iter().collect()
}

/// What a pattern gives for `element`: `Ok(None)` when the key (or field) is missing or of
/// another type; an error when the key lives on another shard.
fn lookup(ctx: &mut Ctx<'_>, pattern: &[u8], element: &Bytes) -> Result<Option<Bytes>, Frame> {
    if pattern == b"#" {
        return Ok(Some(element.clone()));
    }
    let Some((key, field)) = pattern_key(pattern, element) else {
        return Ok(None);
    };
    if !ctx.owns(&key) {
        return Err(Frame::static_error(ELSEWHERE));
    }
    let now = ctx.now_ms;
    let Some(entry) = ctx.db().get(&key, now) else {
        return Ok(None);
    };
    Ok(match (entry.value(), field) {
        (ValueRef::Inline(bytes), None) => Some(Bytes::copy_from_slice(bytes)),
        (ValueRef::Typed(Value::Str(bytes)), None) => Some(bytes.clone()),
        (ValueRef::Typed(Value::Hash(hash)), Some(field)) => hash.get(field).cloned(),
        _ => None,
    })
}

/// C's `strtod` over the whole string, as SORT reads a number: leading blanks, hex, `inf`;
/// `None` when anything trails or it is NaN. An empty string is 0.
fn strtod(bytes: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(bytes)
        .ok()?
        .trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    if text.is_empty() {
        return Some(0.0);
    }
    let (sign, body) = match text.as_bytes()[0] {
        b'-' => (-1.0, &text[1..]),
        b'+' => (1.0, &text[1..]),
        _ => (1.0, text),
    };
    let lower = body.to_ascii_lowercase();
    let value = if lower == "inf" || lower == "infinity" {
        f64::INFINITY
    } else if let Some(hex) = lower.strip_prefix("0x") {
        u64::from_str_radix(hex, 16).ok()? as f64
    } else if body.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        body.parse::<f64>().ok()?
    } else {
        return None;
    };
    (!value.is_nan()).then_some(sign * value)
}

struct Item {
    element: Bytes,
    score: f64,
    /// ALPHA BY: the value compared (`None`: its key is missing).
    by: Option<Bytes>,
}

struct Elements {
    items: Vec<Bytes>,
    is_set: bool,
}

/// The elements of the value at `key`, in its own order (a list's or sorted set's reversed
/// for `desc_native`); WRONGTYPE for other types.
fn elements(ctx: &mut Ctx<'_>, key: &[u8], desc_native: bool) -> Result<Elements, Frame> {
    let now = ctx.now_ms;
    let Some(entry) = ctx.db().get(key, now) else {
        return Ok(Elements {
            items: Vec::new(),
            is_set: false,
        });
    };
    let (mut items, is_set): (Vec<Bytes>, bool) = match entry.value() {
        ValueRef::Typed(Value::List(list)) => (list.iter().cloned().collect(), false),
        ValueRef::Typed(Value::Set(set)) => (set.iter().cloned().collect(), true),
        ValueRef::Typed(Value::ZSet(z)) => (z.iter().map(|(m, _)| m.clone()).collect(), false),
        _ => return Err(Frame::static_error(WRONGTYPE)),
    };
    if desc_native && !is_set {
        items.reverse();
    }
    Ok(Elements { items, is_set })
}

/// SORT's LIMIT over `len` elements: the first and last index kept (`None`: nothing).
fn window(len: usize, limit: Option<(i64, i64)>) -> Option<(usize, usize)> {
    let len = len as i64;
    let (offset, count) = limit.unwrap_or((0, -1));
    let start = offset.clamp(0, len);
    let count = count.clamp(-1, len);
    let mut end = if count < 0 {
        len - 1
    } else {
        start + count - 1
    };
    let start = if start >= len {
        end = len - 2;
        len - 1
    } else {
        start
    };
    end = end.min(len - 1);
    (start <= end).then_some((start as usize, end as usize))
}

fn compare(a: &Item, b: &Item, alpha: bool, by_pattern: bool) -> Ordering {
    if !alpha {
        return a
            .score
            .partial_cmp(&b.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.element.cmp(&b.element));
    }
    if by_pattern {
        return match (&a.by, &b.by) {
            (Some(x), Some(y)) => x.cmp(y),
            (None, None) => Ordering::Equal,
            (None, _) => Ordering::Less,
            (_, None) => Ordering::Greater,
        };
    }
    a.element.cmp(&b.element)
}

fn sorted(ctx: &mut Ctx<'_>, key: &[u8], o: &SortArgs) -> Result<Vec<Bytes>, Frame> {
    let (mut dont_sort, mut alpha, mut by) = (o.dont_sort, o.alpha, o.by.clone());
    let all = elements(ctx, key, dont_sort && o.desc)?;
    if dont_sort && all.is_set && o.store.is_some() {
        // An unsorted set is sorted ALPHA when stored, so the stored list does not depend
        // on the set's internal order.
        (dont_sort, alpha, by) = (false, true, None);
    }
    if dont_sort {
        by = None;
    }
    let all = all.items;
    let range = window(all.len(), o.limit);
    if dont_sort {
        return Ok(range.map_or(Vec::new(), |(start, end)| all[start..=end].to_vec()));
    }
    let mut items = Vec::with_capacity(all.len());
    let mut not_double = false;
    for element in all {
        let value = match &by {
            Some(pattern) => lookup(ctx, pattern, &element)?,
            None => Some(element.clone()),
        };
        let mut item = Item {
            element,
            score: 0.0,
            by: None,
        };
        match (alpha, value) {
            (true, value) if by.is_some() => item.by = value,
            (true, _) => {}
            (false, Some(value)) => match strtod(&value) {
                Some(score) => item.score = score,
                None => not_double = true,
            },
            (false, None) => {}
        }
        items.push(item);
    }
    if not_double {
        return Err(Frame::static_error(NOT_DOUBLE));
    }
    let by_pattern = by.is_some();
    items.sort_by(|a, b| {
        let order = compare(a, b, alpha, by_pattern);
        if o.desc {
            order.reverse()
        } else {
            order
        }
    });
    let Some((start, end)) = range else {
        return Ok(Vec::new());
    };
    Ok(items
        .into_iter()
        .skip(start)
        .take(end - start + 1)
        .map(|i| i.element)
        .collect())
}

fn run(ctx: &mut Ctx<'_>, args: &[Bytes], read_only: bool) -> Frame {
    match parse(args, read_only) {
        Ok(o) => run_parsed(ctx, &args[1], &o),
        Err(err) => err,
    }
}

/// SORT of `key`, parsed: the sorted elements (or what GET names for them), or their count
/// once STOREd.
pub fn run_parsed(ctx: &mut Ctx<'_>, key: &[u8], o: &SortArgs) -> Frame {
    let result = sorted(ctx, key, o).and_then(|elements| {
        if o.gets.is_empty() {
            return Ok(elements.into_iter().map(Some).collect::<Vec<_>>());
        }
        let mut out = Vec::with_capacity(elements.len() * o.gets.len());
        for element in &elements {
            for pattern in &o.gets {
                out.push(lookup(ctx, pattern, element)?);
            }
        }
        Ok(out)
    });
    let values = match result {
        Ok(values) => values,
        Err(err) => {
            // Nothing happened: nothing to journal.
            ctx.rewrite = Some(Vec::new());
            return err;
        }
    };
    match &o.store {
        None => Frame::Array(
            values
                .into_iter()
                .map(|v| v.map_or(Frame::Null, Frame::Bulk))
                .collect(),
        ),
        Some(dest) => {
            let len = values.len() as i64;
            ctx.db().remove(dest);
            if !values.is_empty() {
                let list: std::collections::VecDeque<Bytes> =
                    values.into_iter().map(Option::unwrap_or_default).collect();
                // Blocked clients learn of a new list from the command's run (`Shard::
                // signal_written`): an overwrite serves none of them, as in Redis.
                ctx.db()
                    .insert(dest, Entry::new(Value::List(Box::new(list))));
            }
            Frame::Integer(len)
        }
    }
}

pub fn sort(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    run(ctx, args, false)
}

pub fn sort_ro(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    run(ctx, args, true)
}

/// SORT's keys: the sorted key and the STORE key (BY and GET keys are found at run time).
pub fn sort_keys(args: &[Bytes]) -> Vec<usize> {
    let mut keys = vec![1];
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        if is(&args[j], "limit") && left >= 2 {
            j += 2;
        } else if (is(&args[j], "by") || is(&args[j], "get")) && left >= 1 {
            j += 1;
        } else if is(&args[j], "store") && left >= 1 {
            keys.push(j + 1);
            j += 1;
        }
        j += 1;
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_windows_read_as_redis_reads_them() {
        assert_eq!(strtod(b" 1.5"), Some(1.5));
        assert_eq!(strtod(b""), Some(0.0));
        assert_eq!(strtod(b"0x1A"), Some(26.0));
        assert_eq!(strtod(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(strtod(b"1x"), None);
        assert_eq!(strtod(b"nan"), None);
        assert_eq!(window(5, None), Some((0, 4)));
        assert_eq!(window(5, Some((1, 2))), Some((1, 2)));
        assert_eq!(window(5, Some((10, 2))), None);
        assert_eq!(window(5, Some((-3, 0))), None);
        assert_eq!(window(0, None), None);
    }
}
