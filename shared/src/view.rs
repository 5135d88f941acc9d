//! What `GET …/node/{n}/view` answers ([`NodeView`], one variant per simulation kind), and
//! [`LogEntry::payload`] to read a log entry's `data` as one of the event payload types
//! (`social.rs`, `trading.rs`, `abm.rs`).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::LogEntry;
use crate::abm::AbmView;
use crate::trading::TradingView;

/// The kind-specific view of a node, tagged by `kind`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NodeView {
    Social(SocialView),
    /// Boxed: the trading view is several times the size of the others.
    Trading(Box<TradingView>),
    Abm(AbmView),
}

impl NodeView {
    /// The simulation kind the view is of.
    pub fn kind(&self) -> crate::SimKind {
        match self {
            NodeView::Social(_) => crate::SimKind::Social,
            NodeView::Trading(_) => crate::SimKind::Trading,
            NodeView::Abm(_) => crate::SimKind::Abm,
        }
    }

    pub fn social(&self) -> Option<&SocialView> {
        match self {
            NodeView::Social(v) => Some(v),
            _ => None,
        }
    }

    pub fn trading(&self) -> Option<&TradingView> {
        match self {
            NodeView::Trading(v) => Some(v),
            _ => None,
        }
    }

    pub fn abm(&self) -> Option<&AbmView> {
        match self {
            NodeView::Abm(v) => Some(v),
            _ => None,
        }
    }
}

/// The `social` variant of a node view: the scene type and its state (an object whose keys
/// differ per scene).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SocialView {
    pub scene: String,
    pub state: Value,
    /// The prose this node's prompts carry (a `scene_prose_set` may have changed it from the
    /// tree's), and a custom scene's roles, phases and outcomes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub about: Option<crate::SceneAbout>,
}

impl LogEntry {
    /// The entry's `data` read as `T` (one of the payload types of its `type`); `None` when it
    /// does not have that shape.
    pub fn payload<T: DeserializeOwned>(&self) -> Option<T> {
        T::deserialize(&self.data).ok()
    }
}
