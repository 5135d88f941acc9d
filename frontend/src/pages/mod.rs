//! The pages (spec §4.1–4.5) and their panels: home, New (write a scenario of any kind), SimTree (graph pane | inspector, ops,
//! branch editor, compare, node details), Studio (graph + ops | events | agents, live over the
//! node socket) and the read-only simulation viewer. Requests of a tree go through
//! [`Tree::run`], so a button cannot fire twice while its request is in flight.

mod abm_details;
mod agents;
mod common;
mod compare_panel;
mod create;
mod details;
mod events;
mod home;
mod inspector;
mod live_text;
mod new;
mod notebook;
mod ops_panel;
mod overlay;
mod scene_about;
mod simtree;
mod studio;
mod trading_details;
mod tree_bar;
mod viewer;

pub use home::Home;
pub use new::NewPage;
pub use simtree::SimTreePage;
pub use studio::StudioPage;
pub use viewer::SimViewer;
