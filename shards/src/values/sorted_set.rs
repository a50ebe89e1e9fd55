//! The sorted set value: members with scores, ordered by (score, member) as Redis orders them.
//!
//! Two structures, each made for half of the commands:
//! - `scores`, an insertion-ordered hash map member -> score: ZSCORE, ZADD's lookups, and the
//!   positions ZSCAN and ZRANDMEMBER step by;
//! - `order`, the (score, member) pairs sorted in chunks of at most `CHUNK_MAX` (a sorted
//!   list of sorted vectors). Rank, index and score-bound lookups are a binary search over the
//!   chunks' last elements, a walk over chunk lengths and a binary search in one chunk, so
//!   ZRANK and ZRANGE cost O(n / CHUNK_MAX + log n) with contiguous memory, and an insert moves
//!   at most one chunk's elements. (Redis uses a skip list; this is simpler and more compact
//!   and, for the set sizes job queues keep, as fast.)

use std::cmp::Ordering;

use bytes::Bytes;
use indexmap::IndexMap;

use crate::hashing::Hasher;

/// Most pairs in one chunk of the ordered index; a fuller chunk splits in two.
pub const CHUNK_MAX: usize = 512;

/// A score with Redis's total order (no NaN is ever stored; -0 is stored as 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Score(pub f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

type Pair = (Score, Bytes);

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ZSet {
    scores: IndexMap<Bytes, f64, Hasher>,
    order: Vec<Vec<Pair>>,
}

impl ZSet {
    pub fn len(&self) -> usize {
        self.scores.len()
    }

    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.scores.get(member).copied()
    }

    /// The member and score at insertion position `i` (ZSCAN, ZRANDMEMBER).
    pub fn at_position(&self, i: usize) -> Option<(&Bytes, f64)> {
        self.scores.get_index(i).map(|(m, s)| (m, *s))
    }

    /// Sets `member`'s score; returns the old score, if it had one.
    pub fn insert(&mut self, member: Bytes, score: f64) -> Option<f64> {
        let score = if score == 0.0 { 0.0 } else { score };
        let old = self.scores.insert(member.clone(), score);
        if let Some(old) = old {
            if old == score {
                return Some(old);
            }
            self.remove_ordered(&(Score(old), member.clone()));
        }
        self.insert_ordered((Score(score), member));
        old
    }

    /// Removes `member`; returns its score if it was there.
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        let (member, score) = self.scores.swap_remove_entry(member)?;
        self.remove_ordered(&(Score(score), member));
        Some(score)
    }

    /// The first chunk whose last pair is not less than `pair` (the chunk it belongs in).
    fn chunk_for(&self, pair: &Pair) -> usize {
        self.order
            .partition_point(|chunk| chunk.last().expect("chunks are never empty") < pair)
            .min(self.order.len().saturating_sub(1))
    }

    fn insert_ordered(&mut self, pair: Pair) {
        if self.order.is_empty() {
            self.order.push(vec![pair]);
            return;
        }
        let c = self.chunk_for(&pair);
        let chunk = &mut self.order[c];
        let at = chunk.partition_point(|p| p < &pair);
        chunk.insert(at, pair);
        if chunk.len() > CHUNK_MAX {
            let tail = chunk.split_off(chunk.len() / 2);
            self.order.insert(c + 1, tail);
        }
    }

    fn remove_ordered(&mut self, pair: &Pair) {
        if self.order.is_empty() {
            return;
        }
        let c = self.chunk_for(pair);
        let chunk = &mut self.order[c];
        if let Ok(at) = chunk.binary_search(pair) {
            chunk.remove(at);
            if chunk.is_empty() {
                self.order.remove(c);
            }
        }
    }

    /// How many pairs satisfy `before` (a predicate true for a prefix of the order).
    pub fn partition_point(&self, before: impl Fn(f64, &Bytes) -> bool) -> usize {
        let full = self.order.partition_point(|chunk| {
            let (s, m) = chunk.last().expect("chunks are never empty");
            before(s.0, m)
        });
        let mut count: usize = self.order[..full].iter().map(Vec::len).sum();
        if let Some(chunk) = self.order.get(full) {
            count += chunk.partition_point(|(s, m)| before(s.0, m));
        }
        count
    }

    /// The 0-based rank of `member` in ascending order.
    pub fn rank(&self, member: &[u8]) -> Option<usize> {
        let score = self.score(member)?;
        Some(
            self.partition_point(|s, m| Score(s) < Score(score) || (s == score && m[..] < *member)),
        )
    }

    /// Pairs with ranks `from..to` (ascending ranks), ascending or, with `rev`, descending.
    pub fn range(&self, from: usize, to: usize, rev: bool) -> Vec<(Bytes, f64)> {
        let to = to.min(self.len());
        if from >= to {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(to - from);
        let mut seen = 0;
        for chunk in &self.order {
            let (start, end) = (seen, seen + chunk.len());
            seen = end;
            if end <= from {
                continue;
            }
            if start >= to {
                break;
            }
            let lo = from.saturating_sub(start);
            let hi = (to - start).min(chunk.len());
            out.extend(chunk[lo..hi].iter().map(|(s, m)| (m.clone(), s.0)));
        }
        if rev {
            out.reverse();
        }
        out
    }

    /// Every pair in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = (&Bytes, f64)> {
        self.order.iter().flatten().map(|(s, m)| (m, s.0))
    }

    /// Every member and score, in insertion order (cheaper than `iter` when order does not
    /// matter).
    pub fn members(&self) -> impl Iterator<Item = (&Bytes, f64)> {
        self.scores.iter().map(|(m, s)| (m, *s))
    }

    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        let flat: Vec<&Pair> = self.order.iter().flatten().collect();
        assert_eq!(flat.len(), self.scores.len());
        assert!(flat.windows(2).all(|w| w[0] < w[1]));
        assert!(self
            .order
            .iter()
            .all(|c| !c.is_empty() && c.len() <= CHUNK_MAX));
        for (s, m) in flat {
            assert_eq!(self.scores.get(m), Some(&s.0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Random inserts and removals agree with a sorted Vec, across chunk splits.
        #[test]
        fn ranks_and_ranges_match_a_sorted_vec(
            ops in proptest::collection::vec((0u16..3000, -50i32..50, any::<bool>()), 1..3000)
        ) {
            let mut z = ZSet::default();
            let mut model: std::collections::BTreeMap<Vec<u8>, f64> = Default::default();
            for (member, score, insert) in ops {
                let name = format!("m{member}").into_bytes();
                if insert {
                    prop_assert_eq!(z.insert(Bytes::from(name.clone()), score as f64), model.insert(name, score as f64));
                } else {
                    prop_assert_eq!(z.remove(&name), model.remove(&name));
                }
            }
            z.check_invariants();
            let mut sorted: Vec<(Vec<u8>, f64)> = model.into_iter().collect();
            sorted.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
            for (i, (m, _)) in sorted.iter().enumerate().step_by(7) {
                prop_assert_eq!(z.rank(m), Some(i));
            }
            let all: Vec<(Vec<u8>, f64)> = z.range(0, usize::MAX, false).into_iter().map(|(m, s)| (m.to_vec(), s)).collect();
            prop_assert_eq!(&all, &sorted);
            let mid = sorted.len() / 3;
            let part = z.range(mid, mid + 10, true);
            let expected: Vec<_> = sorted[mid..(mid + 10).min(sorted.len())].iter().rev().cloned().collect();
            prop_assert_eq!(part.into_iter().map(|(m, s)| (m.to_vec(), s)).collect::<Vec<_>>(), expected);
            let below_zero = z.partition_point(|s, _| s < 0.0);
            prop_assert_eq!(below_zero, sorted.iter().filter(|(_, s)| *s < 0.0).count());
        }
    }
}
