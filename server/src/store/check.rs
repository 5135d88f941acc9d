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

use super::journal::{Aside, AsideFile, Journal};
use super::postgres::Postgres;
use super::source::state_json;
use super::sql::Db;
use super::sqlite::Sqlite;
use super::vocab::{Cell, Sql};
use super::{Database, StoreError, refuse_emptied, unpack};

/// What `check` found: one line per problem, and what it looked at.
#[derive(Debug, Default)]
pub struct Report {
    pub(crate) problems: Vec<String>,
    pub(crate) trees: usize,
    pub(crate) nodes: usize,
    /// Journal groups not yet in the database (a start-up applies them).
    pub(crate) pending: usize,
}

/// Why `check` or `repair` could not look (a problem they find is a line of the [`Report`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckError {
    #[error("{} is not a simtree data folder (no simtree.db)", .0.display())]
    NotADataFolder(PathBuf),
    /// The store could not be opened or read; its message as the store wrote it.
    #[error("{}", .0.message())]
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
pub(crate) fn check(dir: &Path) -> Result<Report, CheckError> {
    let mut db = open(dir)?;
    let mut report = Report::default();
    let applied = db.journal_applied()?;
    let (_journal, pending, damage) = Journal::open_damaged(&dir.join("simtree.journal"), applied)?;
    report.pending = pending.len();
    report.problems.extend(damage);
    for file in AsideFile::list(dir)? {
        let lacking = match file.why {
            Aside::Reapplied => 0,
            _ => file.groups(applied)?.len(),
        };
        if lacking > 0 {
            report.problems.push(format!(
                "{} was set aside holding {lacking} acknowledged group(s) the database does not have; \
                 `simtree data repair` applies them",
                file.path.display()
            ));
        }
    }
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
pub(crate) fn check_postgres(url: &str) -> Result<Report, CheckError> {
    let mut db = Db::new(Postgres::connect(url)?);
    db.migrate()?;
    let mut report = Report::default();
    rows(&mut db, &mut report)?;
    Ok(report)
}

/// `repair` for PostgreSQL: nothing to apply (no journal), said so.
pub(crate) fn repair_postgres(url: &str) -> Result<String, CheckError> {
    let mut db = Db::new(Postgres::connect(url)?);
    db.migrate()?;
    Ok("PostgreSQL keeps no commit journal (every acknowledged write is committed before its answer): \
        nothing to apply; damaged rows are listed by `simtree data check`"
        .into())
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
                problem(n.id, format!("its parent {p} is missing (the node is left out when the tree loads)"));
            }
        }
        // Every node's state and log rows, a damaged record's too (`None`: its status unknown).
        let statuses = nodes.iter().map(|n| (n.id, Some(n.status))).chain(damaged.iter().map(|(id, _)| (*id, None)));
        for (id, status) in statuses {
            match db.state(t.id, id) {
                Ok(Some(data)) => {
                    if let Err(e) = unpack(&data).and_then(|bytes| {
                        let (_, json) = state_json(&bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                        serde_json::from_slice::<serde::de::IgnoredAny>(json)
                            .map(drop)
                            .map_err(|e| StoreError::Corrupt(format!("not JSON: {e}")))
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
        let all: Vec<u64> = nodes.iter().map(|n| n.id).chain(damaged.iter().map(|(id, _)| *id)).collect();
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

/// Applies the journal's intact groups and sets a damaged journal, or one with a group the
/// database refuses, aside; then applies what journals set aside earlier hold that the
/// database lacks, where that is safe. Returns what it did, a line per journal.
pub(crate) fn repair(dir: &Path) -> Result<String, CheckError> {
    let mut db = open(dir)?;
    let applied = db.journal_applied()?;
    let path = dir.join("simtree.journal");
    let (mut journal, pending, damage) = Journal::open_damaged(&path, applied)?;
    let groups = pending.len();
    let mut done = Vec::new();
    let applied = match super::apply_groups(&mut db, pending, applied) {
        Ok(now) => {
            match damage {
                // The damaged file is kept aside, the intact groups are in the database.
                Some(damage) => done.push(format!(
                    "{damage}; applied the {groups} intact group(s) before it; the journal was set aside as {}",
                    journal.set_aside(Aside::Failed)?.display()
                )),
                None => {
                    journal.clear()?;
                    done.push(format!("the journal is intact; applied the {groups} group(s) it still held"));
                }
            }
            now
        }
        // Not now: nothing is set aside; run it again once the fault has passed.
        Err(u) if u.error.is_transient() => return Err(u.at_start_up(&path, groups).into()),
        Err(u) => {
            done.push(format!(
                "the database refuses group {} of the journal: {}; applied the {} group(s) before it; \
                 the journal was set aside as {} (its groups are acknowledged writes the database does not have)",
                u.seq,
                u.error.message(),
                u.seq - applied - 1,
                journal.set_aside(Aside::Refused)?.display()
            ));
            u.applied
        }
    };
    drop(journal);
    done.extend(reapply_set_aside(&mut db, dir, applied)?);
    Ok(done.join("\n"))
}

/// Applies the groups that journals set aside earlier hold beyond `applied`: acknowledged
/// writes a start-up before issue #42's fix set aside on a transient fault, or ones the
/// database refused then. Refused when the database took writes after the file was set aside
/// (a server served without them, and may have given their ids to other nodes): then a person
/// decides, and the file is left as it is.
fn reapply_set_aside<S: Sql>(db: &mut Db<S>, dir: &Path, mut applied: u64) -> Result<Vec<String>, CheckError> {
    let mut done = Vec::new();
    for file in AsideFile::list(dir)? {
        if file.why == Aside::Reapplied {
            continue;
        }
        let pending = file.groups(applied)?;
        if pending.is_empty() {
            continue;
        }
        let groups = pending.len();
        let shown = file.path.display();
        if let Some(t) = db.trees()?.into_iter().find(|t| t.last_activity > file.at_ms) {
            done.push(format!(
                "{shown} holds {groups} acknowledged group(s) the database does not have, but the database took \
                 writes after it was set aside (tree {} changed at {} ms, the file at {} ms): applying them now could \
                 overwrite those; the file is left as it is",
                t.id, t.last_activity, file.at_ms
            ));
            continue;
        }
        let before = applied;
        match super::apply_groups(db, pending, applied) {
            Ok(now) => {
                applied = now;
                done.push(format!(
                    "applied the {groups} group(s) {shown} held that the database did not have; the file is kept as {}",
                    file.rename(Aside::Reapplied)?.display()
                ));
            }
            Err(u) if u.error.is_transient() => return Err(u.at_start_up(&file.path, groups).into()),
            Err(u) => {
                applied = u.applied;
                let kept = match file.why {
                    Aside::Failed => file.rename(Aside::Refused)?,
                    _ => file.path.clone(),
                };
                done.push(format!(
                    "{shown}: the database refuses group {}: {}; applied the {} group(s) before it; the file is kept as {}",
                    u.seq,
                    u.error.message(),
                    u.seq - before - 1,
                    kept.display()
                ));
            }
        }
    }
    Ok(done)
}
