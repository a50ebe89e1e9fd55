//! LCS: the longest common subsequence of two strings, as Redis 7.0 computes it (the
//! dynamic-programming table, walked back from the end, ties going left), with its LEN, IDX,
//! MINMATCHLEN and WITHMATCHLEN options, replies and error texts. The keys may live on two
//! shards (the server's borrowing path brings them together). The table is bounded as
//! Redis bounds it: at most proto-max-bulk-len (512 MB) of 32-bit cells.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::args::{int_arg, is};
use crate::ctx::Ctx;
use crate::errors::SYNTAX;
use crate::families::strings::{read_string, STRING_BYTES_MAX};

const NOT_STRINGS: &str = "ERR The specified keys must contain string values";
const LEN_AND_IDX: &str = "ERR If you want both the length and indexes, please just use IDX.";
const TABLE_TOO_BIG: &str =
    "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len";

struct Options {
    len: bool,
    idx: bool,
    min_match: u64,
    with_match_len: bool,
}

fn options(args: &[Bytes]) -> Result<Options, Frame> {
    let mut o = Options {
        len: false,
        idx: false,
        min_match: 0,
        with_match_len: false,
    };
    let mut at = 3;
    while at < args.len() {
        let arg = &args[at];
        if is(arg, "idx") {
            o.idx = true;
        } else if is(arg, "len") {
            o.len = true;
        } else if is(arg, "withmatchlen") {
            o.with_match_len = true;
        } else if is(arg, "minmatchlen") && at + 1 < args.len() {
            o.min_match = int_arg(&args[at + 1])?.max(0) as u64;
            at += 1;
        } else {
            return Err(Frame::static_error(SYNTAX));
        }
        at += 1;
    }
    if o.idx && o.len {
        return Err(Frame::static_error(LEN_AND_IDX));
    }
    Ok(o)
}

/// One run of matching bytes, found walking back: its ranges in `a` and `b`.
struct Match {
    a: (u64, u64),
    b: (u64, u64),
}

impl Match {
    fn len(&self) -> u64 {
        self.a.1 - self.a.0 + 1
    }
}

/// The LCS of `a` and `b`, and its runs of contiguous matches from the end back.
fn walk(a: &[u8], b: &[u8]) -> (Vec<u8>, Vec<Match>) {
    let (n, m) = (a.len(), b.len());
    let width = n + 1;
    let mut table = vec![0u32; width * (m + 1)];
    let cell = |i: usize, j: usize| i + j * width;
    for j in 1..=m {
        for i in 1..=n {
            table[cell(i, j)] = if a[i - 1] == b[j - 1] {
                table[cell(i - 1, j - 1)] + 1
            } else {
                table[cell(i - 1, j)].max(table[cell(i, j - 1)])
            };
        }
    }
    let mut lcs = vec![0u8; table[cell(n, m)] as usize];
    let mut runs = Vec::new();
    let mut run: Option<Match> = None;
    let (mut i, mut j, mut k) = (n, m, lcs.len());
    while i > 0 && j > 0 {
        if a[i - 1] == b[j - 1] {
            k -= 1;
            lcs[k] = a[i - 1];
            let (ai, bj) = ((i - 1) as u64, (j - 1) as u64);
            match run.as_mut() {
                // Contiguous with the run being walked: it grows backwards.
                Some(r) if r.a.0 == ai + 1 && r.b.0 == bj + 1 => {
                    r.a.0 = ai;
                    r.b.0 = bj;
                }
                _ => {
                    runs.extend(run.take());
                    run = Some(Match {
                        a: (ai, ai),
                        b: (bj, bj),
                    });
                }
            }
            i -= 1;
            j -= 1;
            if i == 0 || j == 0 {
                runs.extend(run.take());
            }
        } else {
            runs.extend(run.take());
            if table[cell(i - 1, j)] > table[cell(i, j - 1)] {
                i -= 1;
            } else {
                j -= 1;
            }
        }
    }
    (lcs, runs)
}

pub fn lcs(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Frame {
    let (a, b) = match (read_string(ctx, &args[1]), read_string(ctx, &args[2])) {
        (Ok(a), Ok(b)) => (a.unwrap_or_default(), b.unwrap_or_default()),
        _ => return Frame::static_error(NOT_STRINGS),
    };
    let o = match options(args) {
        Ok(o) => o,
        Err(err) => return err,
    };
    let cells = (a.len() as u64 + 1) * (b.len() as u64 + 1);
    if cells.saturating_mul(4) > STRING_BYTES_MAX as u64 {
        return Frame::static_error(TABLE_TOO_BIG);
    }
    let (common, runs) = walk(&a, &b);
    if o.len {
        return Frame::Integer(common.len() as i64);
    }
    if !o.idx {
        return Frame::Bulk(Bytes::from(common));
    }
    let pair =
        |(s, e): (u64, u64)| Frame::Array(vec![Frame::Integer(s as i64), Frame::Integer(e as i64)]);
    let matches = runs
        .iter()
        .filter(|r| o.min_match == 0 || r.len() >= o.min_match)
        .map(|r| {
            let mut item = vec![pair(r.a), pair(r.b)];
            if o.with_match_len {
                item.push(Frame::Integer(r.len() as i64));
            }
            Frame::Array(item)
        })
        .collect();
    Frame::Map(vec![
        (
            Frame::Bulk(Bytes::from_static(b"matches")),
            Frame::Array(matches),
        ),
        (
            Frame::Bulk(Bytes::from_static(b"len")),
            Frame::Integer(common.len() as i64),
        ),
    ])
}
