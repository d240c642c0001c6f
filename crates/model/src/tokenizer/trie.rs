//! A byte trie over token texts: WordPiece's longest match and Unigram's
//! prefix enumeration walk it byte by byte, so their cost is bounded by the
//! input and not by the longest token in a (possibly hostile) vocabulary.

use super::table::StrTable;

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Node {
    /// Children are `edges[first..first + len]`, sorted by byte.
    first: u32,
    len: u16,
    /// The token whose text ends here, or [`NONE`].
    value: u32,
}

#[derive(Debug, Default)]
pub(crate) struct Trie {
    nodes: Vec<Node>,
    edges: Vec<(u8, u32)>,
}

impl Trie {
    /// The trie of the tokens `keep` accepts (texts are distinct: the
    /// table deduplicates them). Children of a node are laid out together
    /// by building level by level from the sorted texts.
    pub fn build(tokens: &StrTable, keep: impl Fn(u32) -> bool) -> Trie {
        let mut ids: Vec<u32> = (0..tokens.len() as u32).filter(|&id| keep(id)).collect();
        ids.sort_unstable_by(|&a, &b| tokens.get(a).cmp(tokens.get(b)));
        let mut trie = Trie {
            nodes: vec![Node {
                first: 0,
                len: 0,
                value: NONE,
            }],
            edges: Vec::new(),
        };
        // (node, range of `ids` sharing the node's prefix, prefix length)
        let mut queue = std::collections::VecDeque::from([(0u32, 0usize, ids.len(), 0usize)]);
        while let Some((node, mut lo, hi, depth)) = queue.pop_front() {
            if lo < hi && tokens.get(ids[lo]).len() == depth {
                trie.nodes[node as usize].value = ids[lo];
                lo += 1;
            }
            let first = trie.edges.len() as u32;
            while lo < hi {
                let byte = tokens.get(ids[lo])[depth];
                let mut end = lo + 1;
                while end < hi && tokens.get(ids[end])[depth] == byte {
                    end += 1;
                }
                let child = trie.nodes.len() as u32;
                trie.nodes.push(Node {
                    first: 0,
                    len: 0,
                    value: NONE,
                });
                trie.edges.push((byte, child));
                queue.push_back((child, lo, end, depth + 1));
                lo = end;
            }
            let n = &mut trie.nodes[node as usize];
            n.first = first;
            n.len = (trie.edges.len() as u32 - first) as u16;
        }
        trie
    }

    pub const ROOT: u32 = 0;

    /// The child of `node` along `byte`.
    pub fn child(&self, node: u32, byte: u8) -> Option<u32> {
        let n = self.nodes[node as usize];
        let edges = &self.edges[n.first as usize..n.first as usize + usize::from(n.len)];
        edges
            .binary_search_by_key(&byte, |&(b, _)| b)
            .ok()
            .map(|i| edges[i].1)
    }

    /// The token ending at `node`, if any.
    pub fn value(&self, node: u32) -> Option<u32> {
        let v = self.nodes[node as usize].value;
        (v != NONE).then_some(v)
    }

    /// The node reached from `node` along `bytes`.
    pub fn walk(&self, mut node: u32, bytes: &[u8]) -> Option<u32> {
        for &b in bytes {
            node = self.child(node, b)?;
        }
        Some(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_and_values() {
        let mut t = StrTable::with_capacity(5, 16);
        for s in ["ab", "a", "abc", "b", "x"] {
            t.push(s.as_bytes()).unwrap();
        }
        let trie = Trie::build(&t, |id| id != 4);
        let a = trie.child(Trie::ROOT, b'a').unwrap();
        assert_eq!(trie.value(a), Some(1));
        let ab = trie.child(a, b'b').unwrap();
        assert_eq!(trie.value(ab), Some(0));
        assert_eq!(
            trie.walk(Trie::ROOT, b"abc").and_then(|n| trie.value(n)),
            Some(2)
        );
        assert_eq!(trie.walk(Trie::ROOT, b"x"), None);
        assert_eq!(trie.walk(Trie::ROOT, b"abd"), None);
        assert_eq!(trie.value(Trie::ROOT), None);
    }
}
