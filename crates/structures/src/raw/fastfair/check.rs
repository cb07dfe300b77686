//! The level-by-level walk along the sibling links that recovery and the whole-tree checks
//! share, and those checks ([`FastFair::check`], [`FastFair::blocks`]).

use pmem_ordering::Backend;

use super::layout::{level_word, NodeImage, NODE_TAG};
use super::{FastFair, FastFairError, EMPTY_KEY};

impl<B: Backend> FastFair<B> {
    /// Visit every node level by level along the sibling links, checking it; `visit` gets the
    /// offset, the number of used slots as stored, and the node with duplicates dropped.
    /// Returns every node's offset.
    pub(super) fn walk(
        &self,
        root: u64,
        mut visit: impl FnMut(u64, usize, &NodeImage) -> Result<(), FastFairError>,
    ) -> Result<Vec<u64>, FastFairError> {
        let pool = self.pool();
        let limit = self.step_limit();
        let mut all = Vec::new();
        let mut first = root;
        let mut level = level_word(pool, root)?;
        if level > 64 {
            return Err(self.corrupt(format!("root level {level}")));
        }
        loop {
            let mut node = first;
            let mut previous_high = None;
            let mut next_first = 0;
            while node != 0 {
                if all.len() as u64 > limit {
                    return Err(self.corrupt("the sibling links form a cycle".into()));
                }
                if self
                    .heap
                    .block_size(node)
                    .is_none_or(|size| size < self.node_size)
                {
                    return Err(self.corrupt(format!("node {node:#x} is not an allocated node")));
                }
                let view = self.view(node)?;
                if view.tag() != NODE_TAG {
                    return Err(self.corrupt(format!("node {node:#x} has no node tag")));
                }
                let image = view.image();
                if image.level != level {
                    return Err(self.corrupt(format!(
                        "node {node:#x} has level {} on level {level}",
                        image.level
                    )));
                }
                let raw_len = view.count();
                for slot in raw_len..self.capacity {
                    if view.key(slot) != EMPTY_KEY {
                        return Err(self.corrupt(format!("node {node:#x} has a gap")));
                    }
                }
                let sorted = image.entries.windows(2).all(|w| w[0].0 < w[1].0);
                let low = previous_high.unwrap_or(0);
                let bounded = image
                    .entries
                    .iter()
                    .all(|&(k, _)| k >= low && k < image.high);
                if !sorted || !bounded {
                    return Err(self.corrupt(format!(
                        "node {node:#x} keys are unsorted or outside their bounds"
                    )));
                }
                if level > 0 && next_first == 0 {
                    next_first = image.leftmost;
                }
                visit(node, raw_len, &image)?;
                all.push(node);
                previous_high = Some(image.high);
                node = image.sibling;
            }
            if previous_high != Some(EMPTY_KEY) {
                return Err(self.corrupt(format!("level {level} does not end at the top key")));
            }
            if level == 0 {
                return Ok(all);
            }
            if next_first == 0 {
                return Err(self.corrupt(format!("level {level} has no leftmost child")));
            }
            first = next_first;
            level -= 1;
        }
    }

    /// Every block the tree owns (the redo area and every node), sorted, for heap checks.
    pub fn blocks(&self) -> Result<Vec<u64>, FastFairError> {
        let _all = self.stripes.lock_all();
        let mut out = self.walk(self.root_node()?, |_, _, _| Ok(()))?;
        out.push(self.redo.0);
        out.sort_unstable();
        Ok(out)
    }

    /// Check the whole tree (levels, links, key order and bounds, that every child pointer
    /// names the next level's node) and return the number of keys.
    pub fn check(&self) -> Result<u64, FastFairError> {
        let _all = self.stripes.lock_all();
        let mut keys = 0;
        let mut children: Vec<Vec<u64>> = Vec::new();
        let mut chains: Vec<Vec<u64>> = Vec::new();
        let root = self.root_node()?;
        let top = level_word(self.pool(), root)? as usize;
        children.resize(top + 1, Vec::new());
        chains.resize(top + 1, Vec::new());
        self.walk(root, |offset, raw_len, image| {
            if raw_len != image.entries.len() {
                return Err(self.corrupt(format!("node {offset:#x} holds a duplicate")));
            }
            let level = image.level as usize;
            chains[level].push(offset);
            if level > 0 {
                children[level - 1].push(image.leftmost);
                children[level - 1].extend(image.entries.iter().map(|&(_, c)| c));
            } else {
                keys += image.entries.len() as u64;
            }
            Ok(())
        })?;
        for level in 0..top {
            if children[level] != chains[level] {
                return Err(self.corrupt(format!(
                    "level {level}: the parents' children are not the sibling chain"
                )));
            }
        }
        if keys != self.len() {
            return Err(self.corrupt(format!("{keys} keys, len says {}", self.len())));
        }
        Ok(keys)
    }
}
