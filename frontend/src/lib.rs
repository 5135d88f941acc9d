//! The simtree web UI. This crate is a placeholder until the UI issue lands: the Leptos app
//! (compiled to wasm32) will live here, drawing the tree and streaming node events.

pub use simtree_shared as shared;
