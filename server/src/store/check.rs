//! `simtree data check` and `simtree data repair`: what a SQLite data folder holds that cannot
//! be read back, and the one repair that loses nothing acknowledged.
//!
//! The server refuses to start on a folder whose journal has a damaged record with acknowledged
//! groups after it, and on a database file emptied to zero bytes; it answers a clear error for a
//! node whose stored rows are damaged. `check` lists all of it at once, without starting a
//! server: the journal (damage, groups still to apply), SQLite's own `integrity_check`, and for
//! every tree its nodes' parents, state rows, chunk rows and log rows (checksums, or for rows
//! written before checksums, that they unpack and are JSON). `repair` applies the journal's
//! groups up to the damage and sets the journal aside (renamed, kept for inspection); damaged
//! rows are reported, never silently dropped.

use std::path::Path;

use super::journal::Journal;
use super::sql::{Cell, Db, Sql};
use super::sqlite::Sqlite;
use super::{Database, StoreError, refuse_emptied, unpack};

/// What `check` found: one line per problem, and what it looked at.
#[derive(Debug, Default)]
pub struct Report {
    pub problems: Vec<String>,
    pub trees: usize,
    pub nodes: usize,
    /// Journal groups not yet in the database (a start-up applies them).
    pub pending: usize,
}

fn open(dir: &Path) -> Result<Db<Sqlite>, String> {
    let file = dir.join("simtree.db");
    if !file.exists() {
        return Err(format!(
            "{} is not a simtree data folder (no simtree.db)",
            dir.display()
        ));
    }
    refuse_emptied(dir, &file).map_err(|e| e.0)?;
    let mut db = Db::new(Sqlite::open(&file).map_err(|e| e.0)?);
    db.migrate().map_err(|e| e.0)?;
    Ok(db)
}

/// Verifies a whole data folder (the server must not be running on it).
pub fn check(dir: &Path) -> Result<Report, String> {
    let mut db = open(dir)?;
    let mut report = Report::default();
    let applied = db.journal_applied().map_err(|e| e.0)?;
    let (_journal, pending, damage) = Journal::open_damaged(&dir.join("simtree.journal"), applied).map_err(|e| e.0)?;
    report.pending = pending.len();
    report.problems.extend(damage);
    match db.sql.query("PRAGMA integrity_check", &[]) {
        Ok(rows) => {
            for r in rows {
                if let Some(Cell::Text(t)) = r.into_iter().next()
                    && t != "ok"
                {
                    report.problems.push(format!("sqlite integrity: {t}"));
                }
            }
        }
        Err(e) => report.problems.push(format!("sqlite integrity: {e}")),
    }
    let trees = db.trees().map_err(|e| e.0)?;
    report.trees = trees.len();
    for t in trees {
        let nodes = match db.nodes(t.id) {
            Ok(n) => n,
            Err(e) => {
                report.problems.push(format!("tree {}: its node records: {e}", t.id));
                continue;
            }
        };
        report.nodes += nodes.len();
        let ids: std::collections::HashSet<u64> = nodes.iter().map(|n| n.id).collect();
        let mut problem = |node: u64, what: String| report.problems.push(format!("tree {}, node {node}: {what}", t.id));
        for n in &nodes {
            if let Some(p) = n.parent
                && !ids.contains(&p)
            {
                problem(
                    n.id,
                    format!("its parent {p} is missing (the node is left out when the tree loads)"),
                );
            }
            match db.state(t.id, n.id) {
                Ok(Some(data)) => {
                    if let Err(e) = unpack(&data).and_then(|json| {
                        serde_json::from_slice::<serde::de::IgnoredAny>(&json)
                            .map(drop)
                            .map_err(|e| StoreError(format!("not JSON: {e}")))
                    }) {
                        problem(n.id, format!("state: {e}"));
                    }
                }
                Ok(None) if n.status == simtree_shared::NodeStatus::Done => {
                    problem(n.id, "its state is missing".into());
                }
                Ok(None) => {}
                Err(e) => problem(n.id, format!("state: {e}")),
            }
            match db.log(t.id, n.id) {
                Ok(rows) => {
                    for r in rows {
                        if let Err(e) = r.verified() {
                            problem(n.id, format!("log: {e}"));
                        }
                    }
                }
                Err(e) => problem(n.id, format!("log: {e}")),
            }
        }
        let all: Vec<u64> = nodes.iter().map(|n| n.id).collect();
        match db.chunks(t.id, &all) {
            Ok(chunks) => {
                for ((owner, ord), data) in chunks {
                    if let Err(e) = unpack(&data) {
                        problem(owner, format!("state chunk {ord}: {e}"));
                    }
                }
            }
            Err(e) => report.problems.push(format!("tree {}: chunks: {e}", t.id)),
        }
    }
    Ok(report)
}

/// Applies the journal's intact groups and sets a damaged journal aside. Returns what it did.
pub fn repair(dir: &Path) -> Result<String, String> {
    let mut db = open(dir)?;
    let applied = db.journal_applied().map_err(|e| e.0)?;
    let path = dir.join("simtree.journal");
    let (mut journal, pending, damage) = Journal::open_damaged(&path, applied).map_err(|e| e.0)?;
    let groups = pending.len();
    let kept = match damage {
        // The damaged file is kept aside, the intact groups go into the database.
        Some(d) => Some((d, journal.set_aside().map_err(|e| e.0)?)),
        None => None,
    };
    super::apply_groups(&mut db, journal, pending, applied).map_err(|e| e.0)?;
    Ok(match kept {
        Some((damage, aside)) => format!(
            "{damage}; applied the {groups} intact group(s) before it; the journal was set aside as {}",
            aside.display()
        ),
        None => format!("the journal is intact; applied the {groups} group(s) it still held"),
    })
}
