//! `simtree data check` and `simtree data repair`: what a SQLite data folder or a PostgreSQL
//! database holds that cannot be read back, and the one repair that loses nothing acknowledged.
//!
//! The server refuses to start on a folder whose journal has a damaged record with acknowledged
//! groups after it, and on a database file emptied to zero bytes; it answers a clear error for a
//! node whose stored rows are damaged. `check` lists all of it at once, without starting a
//! server: the journal (damage, groups still to apply), SQLite's own `integrity_check`, and for
//! every tree its nodes' parents, state rows, chunk rows and log rows (checksums, or for rows
//! written before checksums, that they unpack and are JSON). `repair` applies the journal's
//! groups up to the damage and sets the journal aside (renamed, kept for inspection); damaged
//! rows are reported, never silently dropped.
//!
//! A PostgreSQL database is checked row by row the same way (it has no journal, and its pages
//! are its own business); `repair` has nothing to apply there, since every acknowledged write
//! is committed before its answer.

use std::path::{Path, PathBuf};

use super::journal::Journal;
use super::postgres::Postgres;
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

/// Why `check` or `repair` could not look (a problem they find is a line of the [`Report`]).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("{} is not a simtree data folder (no simtree.db)", .0.display())]
    NotADataFolder(PathBuf),
    /// The store could not be opened or read; its message as the store wrote it.
    #[error("{}", .0.0)]
    Store(#[from] StoreError),
}

fn open(dir: &Path) -> Result<Db<Sqlite>, CheckError> {
    let file = dir.join("simtree.db");
    if !file.exists() {
        return Err(CheckError::NotADataFolder(dir.to_path_buf()));
    }
    refuse_emptied(dir, &file)?;
    let mut db = Db::new(Sqlite::open(&file)?);
    db.migrate()?;
    Ok(db)
}

/// Verifies a whole data folder (the server must not be running on it).
pub fn check(dir: &Path) -> Result<Report, CheckError> {
    let mut db = open(dir)?;
    let mut report = Report::default();
    let applied = db.journal_applied()?;
    let (_journal, pending, damage) = Journal::open_damaged(&dir.join("simtree.journal"), applied)?;
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
    rows(&mut db, &mut report)?;
    Ok(report)
}

/// Verifies every row of a PostgreSQL database (a server may be running on it: this only reads).
pub fn check_postgres(url: &str) -> Result<Report, CheckError> {
    let mut db = Db::new(Postgres::connect(url)?);
    db.migrate()?;
    let mut report = Report::default();
    rows(&mut db, &mut report)?;
    Ok(report)
}

/// `repair` for PostgreSQL: nothing to apply (no journal), said so.
pub fn repair_postgres(url: &str) -> Result<String, CheckError> {
    let mut db = Db::new(Postgres::connect(url)?);
    db.migrate()?;
    Ok(
        "PostgreSQL keeps no commit journal (every acknowledged write is committed before its answer): \
        nothing to apply; damaged rows are listed by `simtree data check`"
            .into(),
    )
}

/// Checks every tree's node records, states, chunks and logs.
fn rows<S: Sql>(db: &mut Db<S>, report: &mut Report) -> Result<(), CheckError> {
    let trees = db.trees()?;
    report.trees = trees.len();
    for t in trees {
        let (nodes, damaged) = match db.nodes(t.id) {
            Ok(n) => (n.rows, n.damaged),
            Err(e) => {
                report.problems.push(format!("tree {}: its node records: {e}", t.id));
                continue;
            }
        };
        report.nodes += nodes.len() + damaged.len();
        let mut problem = |node: u64, what: String| report.problems.push(format!("tree {}, node {node}: {what}", t.id));
        for (node, why) in &damaged {
            problem(*node, format!("{why} (the tree does not load)"));
        }
        let ids: std::collections::HashSet<u64> = nodes.iter().map(|n| n.id).collect();
        for n in &nodes {
            if let Some(p) = n.parent
                && !ids.contains(&p)
            {
                problem(
                    n.id,
                    format!("its parent {p} is missing (the node is left out when the tree loads)"),
                );
            }
        }
        // Every node's state and log rows, a damaged record's too (`None`: its status unknown).
        let statuses = nodes
            .iter()
            .map(|n| (n.id, Some(n.status)))
            .chain(damaged.iter().map(|(id, _)| (*id, None)));
        for (id, status) in statuses {
            match db.state(t.id, id) {
                Ok(Some(data)) => {
                    if let Err(e) = unpack(&data).and_then(|json| {
                        serde_json::from_slice::<serde::de::IgnoredAny>(&json)
                            .map(drop)
                            .map_err(|e| StoreError(format!("not JSON: {e}")))
                    }) {
                        problem(id, format!("state: {e}"));
                    }
                }
                Ok(None) if status == Some(simtree_shared::NodeStatus::Done) => {
                    problem(id, "its state is missing".into());
                }
                Ok(None) => {}
                Err(e) => problem(id, format!("state: {e}")),
            }
            match db.log(t.id, id) {
                Ok(rows) => {
                    for r in rows {
                        if let Err(e) = r.verified() {
                            problem(id, format!("log: {e}"));
                        }
                    }
                }
                Err(e) => problem(id, format!("log: {e}")),
            }
        }
        let all: Vec<u64> = nodes
            .iter()
            .map(|n| n.id)
            .chain(damaged.iter().map(|(id, _)| *id))
            .collect();
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
    Ok(())
}

/// Applies the journal's intact groups and sets a damaged journal aside. Returns what it did.
pub fn repair(dir: &Path) -> Result<String, CheckError> {
    let mut db = open(dir)?;
    let applied = db.journal_applied()?;
    let path = dir.join("simtree.journal");
    let (mut journal, pending, damage) = Journal::open_damaged(&path, applied)?;
    let groups = pending.len();
    let kept = match damage {
        // The damaged file is kept aside, the intact groups go into the database.
        Some(d) => Some((d, journal.set_aside()?)),
        None => None,
    };
    super::apply_groups(&mut db, journal, pending, applied)?;
    Ok(match kept {
        Some((damage, aside)) => format!(
            "{damage}; applied the {groups} intact group(s) before it; the journal was set aside as {}",
            aside.display()
        ),
        None => format!("the journal is intact; applied the {groups} group(s) it still held"),
    })
}
