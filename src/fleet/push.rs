//! `gtd push`: validate a config as `gtd check` does and publish it as the fleet's next
//! revision; `--rollback` republishes a kept revision; `--dry-run` shows what would change.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, anyhow, bail};

use super::{Revision, Store};
use crate::config;

/// What `gtd push` was asked.
#[derive(Debug, Clone)]
pub struct Options {
    /// etcd's members and the credentials to show them.
    pub etcd: super::Access,
    /// Key prefix.
    pub prefix: String,
    /// The config file to publish.
    pub config: PathBuf,
    /// Region catalogue override (else the config's `catalog = ...`).
    pub regions: Option<PathBuf>,
    /// Revisions kept after the push.
    pub keep: u64,
    /// Only show what would change.
    pub dry_run: bool,
    /// Republish this kept revision (`Some(None)`: the one before the current).
    pub rollback: Option<Option<u64>>,
}

/// What a command prints and its exit status.
#[derive(Debug)]
pub struct Outcome {
    /// For stdout.
    pub out: String,
    /// For stderr.
    pub err: String,
    /// Exit status.
    pub code: u8,
}

impl Outcome {
    fn ok(out: String) -> Outcome {
        Outcome {
            out,
            err: String::new(),
            code: 0,
        }
    }

    fn refused(err: String) -> Outcome {
        Outcome {
            out: String::new(),
            err,
            code: 1,
        }
    }
}

/// Runs `gtd push`.
pub async fn run(opts: &Options) -> Result<Outcome> {
    if opts.rollback.is_some() {
        return rollback(opts).await;
    }
    // Validation first, offline: a config that fails it never reaches etcd.
    let cfg = match config::load(&opts.config, opts.regions.as_deref()) {
        Ok(cfg) => cfg,
        Err(errors) => return Ok(Outcome::refused(refusal(&errors, &opts.config))),
    };
    let draft = super::draft(&cfg)?;
    // What is published is the text just read: validate exactly it (an edit between the two
    // reads would otherwise slip through).
    let catalog = config::parse_catalog(
        &draft.catalog,
        cfg.catalog_file.as_deref().unwrap_or(Path::new("")),
    )
    .map_err(|e| anyhow!("{e}"))?;
    if let Err(errors) = config::parse(&draft.config, &opts.config, &catalog) {
        return Ok(Outcome::refused(refusal(&errors, &opts.config)));
    }
    let mut warnings = String::new();
    for w in &cfg.warnings {
        warnings.push_str(&format!("warning: {w}\n"));
    }
    let mut store = Store::connect(&opts.etcd, &opts.prefix).await?;
    let seen = store.current().await?;
    let running = store.named(seen.number).await?;
    if let Some(r) = &running
        && r.same_text(&draft)
    {
        let mut o = Outcome::ok(format!(
            "revision {} under {} already has this config; nothing published\n",
            r.revision,
            store.prefix()
        ));
        o.err = warnings;
        return Ok(o);
    }
    let catalog_file = cfg.catalog_file.clone().unwrap_or_default();
    if opts.dry_run {
        let mut out = match &running {
            Some(r) => format!(
                "dry run: revision {} (running) -> {}; nothing published\n\n",
                r.revision,
                opts.config.display()
            ),
            None => format!(
                "dry run: nothing is published under {} yet; {} would be revision 1\n\n",
                store.prefix(),
                opts.config.display()
            ),
        };
        if let Some(r) = &running {
            out.push_str(&text_diff(r, &draft, &format!("{}", opts.config.display())));
            out.push('\n');
            let old = Materialised::write(r)?;
            out.push_str(&sim_compare(&opts.config, &old.config, &catalog_file)?);
        } else {
            out.push_str(&sim_alone(&opts.config, &catalog_file)?);
        }
        let mut o = Outcome::ok(out);
        o.err = warnings;
        return Ok(o);
    }
    let published = store.publish(seen, draft, opts.keep).await?;
    let mut o = Outcome::ok(published_line(&mut store, &published).await?);
    o.err = warnings;
    Ok(o)
}

/// `gtd push --rollback [REV]`: republishes a kept revision's text as a new revision.
async fn rollback(opts: &Options) -> Result<Outcome> {
    let mut store = Store::connect(&opts.etcd, &opts.prefix).await?;
    let seen = store.current().await?;
    let Some(running) = store.named(seen.number).await? else {
        bail!(
            "nothing is published under {} yet: nothing to roll back",
            store.prefix()
        );
    };
    let kept = store.kept().await?;
    let target = match opts.rollback.flatten() {
        Some(n) => n,
        None => *kept
            .iter()
            .rev()
            .find(|&&n| n < running.revision)
            .ok_or_else(|| {
                anyhow!(
                    "no revision before {} is kept: nothing to roll back to",
                    running.revision
                )
            })?,
    };
    let Some(old) = store.revision(target).await? else {
        bail!(
            "revision {target} is not kept under {} (kept: {})",
            store.prefix(),
            numbers(&kept)
        );
    };
    // Certificates and files may have changed since it was published: validated again, as a
    // node will (relative paths against this working directory).
    if let Err(errors) = old.validate() {
        return Ok(Outcome::refused(refusal(&errors, &old.config_file())));
    }
    if running.same_text(&old) {
        return Ok(Outcome::ok(format!(
            "revision {} already has revision {target}'s config; nothing published\n",
            running.revision
        )));
    }
    if opts.dry_run {
        let mut out = format!(
            "dry run: revision {} (running) -> revision {target}'s config; nothing published\n\n",
            running.revision
        );
        out.push_str(&text_diff(&running, &old, &format!("revision {target}")));
        out.push('\n');
        let before = Materialised::write(&running)?;
        let after = Materialised::write(&old)?;
        out.push_str(&sim_compare(&after.config, &before.config, &after.catalog)?);
        return Ok(Outcome::ok(out));
    }
    let draft = Revision {
        revision: 0,
        pushed_at_ms: super::now_ms(),
        pushed_by: super::who(),
        rollback_of: Some(target),
        ..old
    };
    let published = store.publish(seen, draft, opts.keep).await?;
    Ok(Outcome::ok(published_line(&mut store, &published).await?))
}

/// The running revision's document (`None` before the first push).
async fn published_line(store: &mut Store, r: &Revision) -> Result<String> {
    let kept = store.kept().await?;
    let what = match r.rollback_of {
        Some(n) => format!("revision {n}'s config"),
        None => format!("{} with {}", r.config_name, r.catalog_name),
    };
    Ok(format!(
        "published revision {} under {}: {what}; kept revisions {}\n",
        r.revision,
        store.prefix(),
        numbers(&kept)
    ))
}

fn numbers(kept: &[u64]) -> String {
    match (kept.first(), kept.last()) {
        (Some(a), Some(b)) if a != b => format!("{a}..{b}"),
        (Some(a), _) => a.to_string(),
        _ => "none".to_owned(),
    }
}

/// Every error, one per line, and the count: `gtd check`'s words.
fn refusal(errors: &config::ConfigErrors, file: &Path) -> String {
    format!("{}; nothing was published\n", errors.report(file))
}

/// A unified diff of two revisions' config and catalogue texts (empty parts left out).
pub(super) fn text_diff(old: &Revision, new: &Revision, new_name: &str) -> String {
    let mut out = String::new();
    let mut part = |a: &str, b: &str, from: String, to: String| {
        if a == b {
            return;
        }
        let diff = similar::TextDiff::from_lines(a, b);
        out.push_str(
            &diff
                .unified_diff()
                .context_radius(3)
                .header(&from, &to)
                .to_string(),
        );
    };
    part(
        &old.config,
        &new.config,
        format!("revision {} {}", old.revision, old.config_name),
        new_name.to_owned(),
    );
    part(
        &old.catalog,
        &new.catalog,
        format!("revision {} {}", old.revision, old.catalog_name),
        format!("{new_name} catalogue"),
    );
    if out.is_empty() {
        out.push_str("(no change in the text)\n");
    }
    out
}

/// A revision written out for `sim`: the config as a hidden file in the working directory
/// (relative paths in it resolve there, as on a node), the catalogue in a temp dir. Removed
/// when dropped.
pub(super) struct Materialised {
    pub(super) config: PathBuf,
    pub(super) catalog: PathBuf,
    _dir: tempfile::TempDir,
}

impl Materialised {
    pub(super) fn write(r: &Revision) -> Result<Materialised> {
        let dir = tempfile::tempdir().context("creating a temp dir")?;
        let catalog = dir.path().join(&r.catalog_name);
        std::fs::write(&catalog, &r.catalog).context("writing a catalogue for sim")?;
        let name = format!(".gtd-revision-{}-{}.toml", r.revision, std::process::id());
        let config = match std::fs::write(&name, &r.config) {
            Ok(()) => PathBuf::from(name),
            // A read-only working directory: relative paths in the config may then not
            // resolve, and sim says so.
            Err(_) => {
                let p = dir.path().join(&r.config_name);
                std::fs::write(&p, &r.config).context("writing a config for sim")?;
                p
            }
        };
        Ok(Materialised {
            config,
            catalog,
            _dir: dir,
        })
    }
}

impl Drop for Materialised {
    fn drop(&mut self) {
        if self.config.is_relative() {
            let _ = std::fs::remove_file(&self.config);
        }
    }
}

/// The `sim` binary installed beside this one, else the one on `PATH`.
fn sim_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name("sim"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("sim"))
}

fn sim(args: &[&std::ffi::OsStr]) -> Result<String> {
    let bin = sim_binary();
    let out = Command::new(&bin)
        .args(args)
        .output()
        .with_context(|| format!("running {} (the simulator ships beside gtd)", bin.display()))?;
    if !out.status.success() {
        bail!("sim: {}", String::from_utf8_lossy(&out.stderr).trim_end());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `sim --config NEW --compare OLD --regions CATALOG`: the shares before and after.
pub(super) fn sim_compare(new: &Path, old: &Path, catalog: &Path) -> Result<String> {
    sim(&[
        "--config".as_ref(),
        new.as_os_str(),
        "--compare".as_ref(),
        old.as_os_str(),
        "--regions".as_ref(),
        catalog.as_os_str(),
    ])
}

fn sim_alone(config: &Path, catalog: &Path) -> Result<String> {
    sim(&[
        "--config".as_ref(),
        config.as_os_str(),
        "--regions".as_ref(),
        catalog.as_os_str(),
    ])
}
