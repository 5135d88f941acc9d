//! The tree set: every tree of the server, open (its handle in memory) or stored (only its list
//! row, the structure read back on first use), in one map keyed by tree id.
//!
//! A tree moves between the two states in place, under the lock of its map entry: the cache
//! closes an idle tree (open → stored) and a request loads it again (stored → open). A reader
//! therefore always finds a tree in exactly one of the two states, never in neither (a 404 for
//! a tree that exists) nor in both (listed twice). Two maps, one per state, had that gap.

use std::sync::Arc;

use dashmap::DashMap;
use simtree_shared::TreeInfo;

use super::TreeHandle;
use crate::store::TreeRow;

/// One tree of the set.
enum Slot {
    /// In memory.
    Open(Arc<TreeHandle>),
    /// In the store and not in memory: loaded on first use.
    Stored(TreeRow),
}

/// What a lookup found.
pub(super) enum Found {
    Open(Arc<TreeHandle>),
    /// Stored: the caller loads it (see `Core::load`).
    Stored(TreeRow),
}

#[derive(Default)]
pub(super) struct Trees(DashMap<u64, Slot>);

impl Trees {
    pub(super) fn get(&self, id: u64) -> Option<Found> {
        self.0.get(&id).map(|slot| match &*slot {
            Slot::Open(h) => Found::Open(h.clone()),
            Slot::Stored(row) => Found::Stored(row.clone()),
        })
    }

    /// The tree's handle if it is open.
    pub(super) fn open(&self, id: u64) -> Option<Arc<TreeHandle>> {
        match &*self.0.get(&id)? {
            Slot::Open(h) => Some(h.clone()),
            Slot::Stored(_) => None,
        }
    }

    pub(super) fn contains(&self, id: u64) -> bool {
        self.0.contains_key(&id)
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// A new tree (created or imported), open.
    pub(super) fn insert_open(&self, handle: Arc<TreeHandle>) {
        self.0.insert(handle.id, Slot::Open(handle));
    }

    /// A tree as the store has it, replacing whatever was there (start-up; a copy that is out
    /// of date, to be read again).
    pub(super) fn insert_stored(&self, row: TreeRow) {
        self.0.insert(row.id, Slot::Stored(row));
    }

    /// A loaded tree takes the place of its stored row. Returns the handle that is open now:
    /// `handle`, or the one opened first; `None` when the tree was deleted while it loaded.
    pub(super) fn opened(&self, handle: Arc<TreeHandle>) -> Option<Arc<TreeHandle>> {
        let mut slot = self.0.get_mut(&handle.id)?;
        match &*slot {
            Slot::Open(h) => Some(h.clone()),
            Slot::Stored(_) => {
                *slot = Slot::Open(handle.clone());
                Some(handle)
            }
        }
    }

    /// Moves an open tree that nobody else holds and for which `idle` holds to stored, in one
    /// step; returns its handle (the caller frees it).
    pub(super) fn close_if(&self, id: u64, idle: impl Fn(&TreeHandle) -> bool) -> Option<Arc<TreeHandle>> {
        let mut slot = self.0.get_mut(&id)?;
        // Under the entry's write lock, a count of one means no other thread can reach the
        // handle (a reference needs a clone or this entry), so its locks are free.
        let row = match &*slot {
            Slot::Open(h) if Arc::strong_count(h) == 1 && idle(h) => h.row(),
            _ => return None,
        };
        match std::mem::replace(&mut *slot, Slot::Stored(row)) {
            Slot::Open(h) => Some(h),
            Slot::Stored(_) => None,
        }
    }

    /// Takes a tree out of the set.
    pub(super) fn remove(&self, id: u64) -> Option<Found> {
        self.0.remove(&id).map(|(_, slot)| match slot {
            Slot::Open(h) => Found::Open(h),
            Slot::Stored(row) => Found::Stored(row),
        })
    }

    /// The open trees' handles, as of now.
    pub(super) fn open_handles(&self) -> Vec<Arc<TreeHandle>> {
        self.0
            .iter()
            .filter_map(|slot| match &*slot {
                Slot::Open(h) => Some(h.clone()),
                Slot::Stored(_) => None,
            })
            .collect()
    }

    /// Every tree's list entry, by id. The open trees' entries are read after the map is let go
    /// (reading one waits for its tree's lock).
    pub(super) fn infos(&self) -> Vec<TreeInfo> {
        let mut open = Vec::new();
        let mut out = Vec::new();
        for slot in self.0.iter() {
            match &*slot {
                Slot::Open(h) => open.push(h.clone()),
                Slot::Stored(row) => out.push(info_of(row)),
            }
        }
        out.extend(open.iter().map(|h| h.info()));
        out.sort_by_key(|t| t.id);
        out
    }

    /// Every tree's id.
    pub(super) fn ids(&self) -> Vec<u64> {
        self.0.iter().map(|slot| *slot.key()).collect()
    }
}

pub(super) fn info_of(row: &TreeRow) -> TreeInfo {
    TreeInfo {
        id: row.id,
        root: 0,
        name: row.name.clone(),
        scenario: row.scenario.clone(),
        kind: row.kind,
        created: row.created,
        nodes: row.nodes,
        last_activity: row.last_activity,
        document: None,
        scenario_version: None,
        description: row.description.clone(),
        provenance: None,
        scene: None,
        prompt_layout: None,
    }
}
