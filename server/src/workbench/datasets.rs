//! Market datasets users upload, next to the shipped data: checked by
//! [`crate::trading::dataset::parse_dataset`], kept in the store (in memory with `--ephemeral`)
//! as their CSV text, named by trading scenarios as `episode.dataset`. The shipped data is listed
//! as read-only under [`SHIPPED_DATASET`]; a dataset a tree trades on cannot be deleted.
//!
//! With a store, a dataset is parsed only while something trades on it: start-up keeps its
//! description, the first episode that names it reads it back, and it leaves memory with the
//! last one. Parsing one counts against the memory budget (`--max-memory-mb`): an upload or a
//! load that would pass it is refused (409). At most [`MAX_DATASETS`] are kept.

use std::sync::{Arc, Mutex, Weak};

use serde_json::Value;
use simtree_shared::{DatasetInfo, SimKind};

use super::{Core, Full, RequestError, WorkbenchError};
use crate::store::{StoreError, Write};
use crate::trading::data::MarketData;
use crate::trading::dataset::{check_dataset_name, parse_dataset, parsed_size_estimate};

service!(
    /// Uploaded market datasets: imported, listed, deleted while no tree trades on them.
    Datasets
);

/// The name the shipped market data is listed under.
pub(crate) const SHIPPED_DATASET: &str = "shipped";

/// Uploaded datasets a server keeps at most.
pub(crate) const MAX_DATASETS: usize = 64;

/// An uploaded dataset: its description, and its data while it is in use.
pub(crate) struct UserDataset {
    info: DatasetInfo,
    /// The parsed data while an episode holds it (read back from the store when it is gone).
    market: Mutex<Weak<MarketData>>,
    /// Without a store the data has nowhere to be read back from: it stays.
    kept: Option<Arc<MarketData>>,
}

/// The dataset a scenario document trades on (`episode.dataset`), if it names one.
pub(crate) fn dataset_of(document: &Value) -> Option<&str> {
    document["episode"]["dataset"].as_str()
}

fn info_of(
    name: &str,
    market: &MarketData,
    rows: usize,
    first: String,
    last: String,
    text: Option<&str>,
) -> DatasetInfo {
    DatasetInfo {
        name: name.to_string(),
        tickers: market.tickers().into_iter().map(str::to_string).collect(),
        first,
        last,
        rows: rows as u64,
        read_only: text.is_none(),
        sha256: text.map(|t| super::provenance::sha256_hex(t.as_bytes())),
    }
}

impl Datasets<'_> {
    /// `POST /api/datasets?name=N`: checks and keeps a CSV; nothing is kept on a refusal.
    pub fn import_dataset(&self, name: &str, text: &str) -> Result<DatasetInfo, WorkbenchError> {
        check_dataset_name(name)?;
        if name == SHIPPED_DATASET || self.datasets.contains_key(name) {
            return Err(WorkbenchError::DatasetExists(name.to_string()));
        }
        if self.datasets.len() >= MAX_DATASETS {
            return Err(Full::Datasets(MAX_DATASETS).into());
        }
        self.within_memory_budget(name, parsed_size_estimate(text))?;
        let d = parse_dataset(text)?;
        let info = info_of(name, &d.market, d.rows, d.first, d.last, Some(text));
        let market = Arc::new(d.market);
        if let Some(store) = &self.store {
            store.write(Write::Dataset { name: name.to_string(), body: text.to_string() });
            store.flush()?;
        }
        let kept = self.store.is_none().then(|| market.clone());
        self.datasets.insert(
            name.to_string(),
            Arc::new(UserDataset { info: info.clone(), market: Mutex::new(Arc::downgrade(&market)), kept }),
        );
        Ok(info)
    }
}

impl Core {
    /// `Err` (409) when parsing a dataset of `size` bytes (estimated) would take the server's
    /// resident memory past its budget; checked before it is parsed.
    fn within_memory_budget(&self, name: &str, size: u64) -> Result<(), WorkbenchError> {
        let budget = self.memory.budget();
        match crate::memory::resident_bytes() {
            Some(resident) if budget > 0 && resident + size > budget => Err(Full::DatasetMemory {
                name: name.to_string(),
                size_mib: size >> 20,
                in_use_mib: resident >> 20,
                budget_mib: budget >> 20,
            }
            .into()),
            _ => Ok(()),
        }
    }
}

impl Datasets<'_> {
    /// `GET /api/datasets`: the shipped data first, then the uploads by name.
    pub(crate) fn dataset_list(&self) -> Vec<DatasetInfo> {
        let shipped = self.market.as_ref().map(|m| {
            let rows = m.tickers().iter().filter_map(|t| m.bars(t)).map(<[_]>::len).sum();
            let all: Vec<String> = m.tickers().iter().map(|t| t.to_string()).collect();
            let days = m.trading_days(&all, None, None);
            let (first, last) = (days.first().cloned(), days.last().cloned());
            info_of(SHIPPED_DATASET, m, rows, first.unwrap_or_default(), last.unwrap_or_default(), None)
        });
        let mut mine: Vec<DatasetInfo> = self.datasets.iter().map(|d| d.info.clone()).collect();
        mine.sort_by(|a, b| a.name.cmp(&b.name));
        shipped.into_iter().chain(mine).collect()
    }
}

impl Core {
    /// SHA-256 of an uploaded dataset's CSV text (none for the shipped data).
    pub(super) fn dataset_sha256(&self, name: &str) -> Option<String> {
        self.datasets.get(name).and_then(|d| d.info.sha256.clone())
    }
}

impl Datasets<'_> {
    /// Whether a dataset of that name exists (the shipped one included).
    pub(crate) fn has_dataset(&self, name: &str) -> bool {
        name == SHIPPED_DATASET || self.datasets.contains_key(name)
    }

    /// `DELETE /api/datasets/{name}`: refused for the shipped data and while a tree trades on it.
    pub(crate) fn delete_dataset(&self, name: &str) -> Result<(), WorkbenchError> {
        if name == SHIPPED_DATASET {
            return Err(WorkbenchError::ShippedDataset);
        }
        if let Some(tree) = self.tree_using(name)? {
            return Err(WorkbenchError::DatasetInUse { name: name.to_string(), tree });
        }
        if let Some(store) = &self.store {
            store.write(Write::DeleteDataset { name: name.to_string() });
            store.flush()?;
        }
        self.datasets.remove(name);
        Ok(())
    }

    /// A trading tree made from a document that names `dataset` (stored trees are loaded).
    fn tree_using(&self, dataset: &str) -> Result<Option<u64>, WorkbenchError> {
        let ids: Vec<u64> =
            super::Trees(self.0).list().into_iter().filter(|t| t.kind == SimKind::Trading).map(|t| t.id).collect();
        for id in ids {
            let Ok(handle) = self.tree(id) else { continue };
            let uses = handle.lock().document.as_deref().and_then(dataset_of) == Some(dataset);
            if uses {
                return Ok(Some(id));
            }
        }
        Ok(None)
    }
}

impl Core {
    /// The market a trading episode runs on: the shipped data, or the named upload.
    pub(crate) fn market_for(&self, dataset: Option<&str>) -> Result<Option<Arc<MarketData>>, WorkbenchError> {
        match dataset {
            None | Some(SHIPPED_DATASET) => Ok(self.market.clone()),
            Some(name) => {
                let d = self
                    .datasets
                    .get(name)
                    .map(|d| d.clone())
                    .ok_or_else(|| RequestError::UnknownDataset(name.to_string()))?;
                if let Some(m) = &d.kept {
                    return Ok(Some(m.clone()));
                }
                // One load at a time per dataset: two episodes starting together share it.
                let mut held = d.market.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(m) = held.upgrade() {
                    return Ok(Some(m));
                }
                let market = Arc::new(self.read_dataset(name)?);
                *held = Arc::downgrade(&market);
                Ok(Some(market))
            }
        }
    }

    /// A stored dataset parsed again, within the memory budget.
    fn read_dataset(&self, name: &str) -> Result<MarketData, WorkbenchError> {
        let gone = || WorkbenchError::DatasetGone(name.to_string());
        let store = self.store.as_ref().ok_or_else(gone)?;
        let owned = name.to_string();
        let text = store.read(move |db| db.dataset(&owned))?.ok_or_else(gone)?;
        self.within_memory_budget(name, parsed_size_estimate(&text))?;
        let d = parse_dataset(&text)
            .map_err(|source| WorkbenchError::StoredDatasetUnreadable { name: name.to_string(), source })?;
        Ok(d.market)
    }

    /// Lists the stored datasets (start-up): each is parsed once for its description, then
    /// leaves memory until an episode needs it. A row that no longer passes is skipped, loudly.
    pub(super) fn load_datasets(&self) -> Result<(), StoreError> {
        let Some(store) = &self.store else { return Ok(()) };
        for name in store.read(|db| db.dataset_names())? {
            let owned = name.clone();
            let Some(text) = store.read(move |db| db.dataset(&owned))? else {
                continue;
            };
            match parse_dataset(&text) {
                Ok(d) => {
                    let info = info_of(&name, &d.market, d.rows, d.first, d.last, Some(&text));
                    self.datasets
                        .insert(name, Arc::new(UserDataset { info, market: Mutex::new(Weak::new()), kept: None }));
                }
                Err(e) => tracing::warn!(dataset = name, "a stored dataset is unreadable: {e}"),
            }
        }
        Ok(())
    }
}
