//! The New page's draft, kept in the tab's sessionStorage: each kind's JSON text (a text that
//! does not parse is kept as typed), the library name and the scenario started from. It is
//! written after every edit and read when the page opens, so going to another page or reloading
//! loses nothing; it ends with the tab. A draft that does not read back is ignored.

use serde::{Deserialize, Serialize};

use super::Origin;
use crate::api;

/// The sessionStorage key.
const KEY: &str = "simtree:newDraft";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Kept {
    /// The JSON view's text of each kind, in the picker's order (social, trading, ABM).
    pub texts: [Option<String>; 3],
    pub save_name: String,
    pub origin: Option<Origin>,
}

impl Kept {
    /// The draft this tab kept, or an empty one.
    pub fn read() -> Kept {
        api::session_get(KEY).and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default()
    }

    pub fn write(&self) {
        if let Ok(text) = serde_json::to_string(self) {
            api::session_set(KEY, &text);
        }
    }
}
