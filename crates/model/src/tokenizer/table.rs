//! Byte-string lookup tables that own their strings in one arena, so a
//! 262k-token vocabulary costs two allocations instead of 262k.

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

/// Strings indexed by id, with a reverse lookup.
#[derive(Debug, Default)]
pub(crate) struct StrTable {
    arena: Vec<u8>,
    /// `ends[i]` is where string `i` ends; it starts where `i - 1` ends.
    ends: Vec<usize>,
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

impl StrTable {
    pub fn with_capacity(n: usize, bytes: usize) -> Self {
        StrTable {
            arena: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(n),
            index: HashTable::with_capacity(n),
            hasher: DefaultHashBuilder::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn get(&self, id: u32) -> &[u8] {
        let i = id as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.arena[start..self.ends[i]]
    }

    /// Append a string; if it is already present, the existing id is
    /// returned as the error and the table is unchanged.
    pub fn push(&mut self, s: &[u8]) -> Result<u32, u32> {
        let hash = self.hasher.hash_one(s);
        if let Some(&id) = self.index.find(hash, |&id| self.get(id) == s) {
            return Err(id);
        }
        let id = self.ends.len() as u32;
        self.arena.extend_from_slice(s);
        self.ends.push(self.arena.len());
        let (arena, ends, hasher) = (&self.arena, &self.ends, &self.hasher);
        let get = |i: u32| {
            let i = i as usize;
            let start = if i == 0 { 0 } else { ends[i - 1] };
            &arena[start..ends[i]]
        };
        self.index
            .insert_unique(hash, id, |&i| hasher.hash_one(get(i)));
        Ok(id)
    }

    pub fn find(&self, s: &[u8]) -> Option<u32> {
        let hash = self.hasher.hash_one(s);
        self.index.find(hash, |&id| self.get(id) == s).copied()
    }
}

/// BPE merge ranks keyed by the pair of strings, as llama.cpp's `bpe_ranks`
/// (keyed by text, not ids, so merges of strings that are not tokens behave
/// the same way there and here).
#[derive(Debug, Default)]
pub(crate) struct MergeTable {
    /// Left and right parts of every kept merge, back to back.
    parts: StrTable,
    /// `(rank, left len)` of each kept merge, indexed by `parts` id.
    meta: Vec<(u32, u32)>,
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

impl MergeTable {
    pub fn with_capacity(n: usize) -> Self {
        MergeTable {
            parts: StrTable::with_capacity(0, n * 8),
            meta: Vec::with_capacity(n),
            index: HashTable::with_capacity(n),
            hasher: DefaultHashBuilder::default(),
        }
    }

    fn pair(&self, k: u32) -> (&[u8], &[u8]) {
        let s = self.parts.get(k);
        s.split_at(self.meta[k as usize].1 as usize)
    }

    /// Insert unless present: like `emplace`, the first rank of a pair wins.
    pub fn insert(&mut self, left: &[u8], right: &[u8], rank: u32) {
        let hash = self.hasher.hash_one((left, right));
        if self
            .index
            .find(hash, |&k| self.pair(k) == (left, right))
            .is_some()
        {
            return;
        }
        let k = self.meta.len() as u32;
        // The arena may hold the same joined string twice (for different
        // splits); only the pair index must be unique, so StrTable's own
        // dedup index is bypassed.
        self.parts.arena.extend_from_slice(left);
        self.parts.arena.extend_from_slice(right);
        self.parts.ends.push(self.parts.arena.len());
        self.meta.push((rank, left.len() as u32));
        let (parts, meta, hasher) = (&self.parts, &self.meta, &self.hasher);
        self.index.insert_unique(hash, k, |&i| {
            let s = parts.get(i);
            hasher.hash_one(s.split_at(meta[i as usize].1 as usize))
        });
    }

    pub fn rank(&self, left: &[u8], right: &[u8]) -> Option<u32> {
        let hash = self.hasher.hash_one((left, right));
        self.index
            .find(hash, |&k| self.pair(k) == (left, right))
            .map(|&k| self.meta[k as usize].0)
    }

    /// The joined text (left then right) of every kept merge.
    pub fn joined(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.meta.len() as u32).map(|k| self.parts.get(k))
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.meta.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn str_table_roundtrip_and_dedup() {
        let mut t = StrTable::with_capacity(4, 16);
        assert_eq!(t.push(b"ab"), Ok(0));
        assert_eq!(t.push(b""), Ok(1));
        assert_eq!(t.push(b"c"), Ok(2));
        assert_eq!(t.push(b"ab"), Err(0));
        assert_eq!(t.get(0), b"ab");
        assert_eq!(t.get(1), b"");
        assert_eq!(t.find(b"c"), Some(2));
        assert_eq!(t.find(b"x"), None);
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn merge_table_keeps_first_rank() {
        let mut m = MergeTable::with_capacity(4);
        m.insert(b"a", b"bc", 0);
        m.insert(b"ab", b"c", 1);
        m.insert(b"a", b"bc", 2);
        assert_eq!(m.rank(b"a", b"bc"), Some(0));
        assert_eq!(m.rank(b"ab", b"c"), Some(1));
        assert_eq!(m.rank(b"abc", b""), None);
        assert_eq!(m.len(), 2);
    }
}
