//! `gtd push`: validate a config as `gtd check` does and publish it as the fleet's next
//! revision; `--rollback` republishes a kept revision; `--dry-run` shows what would change.

use super::{Class, Classified};
use std::path::{Path, PathBuf};

use super::compare::{text_diff, validated};
use super::outcome::{Outcome, REFUSED};
use super::ramp::record;
use super::{Revision, Store};
use gtd_core::config;
use gtd_sim as sim;

/// Why `gtd push` could not do what it was asked (a config that fails validation is not an
/// error but a refusal: [`Outcome`] with status 1).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// etcd, as the fleet's store reports it: its class is what [`super::retrying`]
    /// reads, its chain what [`super::describe`] tells.
    #[error(transparent)]
    Store(#[from] super::Error),
    /// The config or catalogue file could not be read again for publishing.
    #[error("{0}")]
    Read(String),
    /// The catalogue text read for publishing does not validate.
    #[error(transparent)]
    Catalog(config::ConfigErrors),
    /// `--rollback` with nothing published.
    #[error("nothing is published under {prefix} yet: nothing to roll back")]
    NothingPublished {
        /// The key prefix.
        prefix: String,
    },
    /// `--rollback` without a number, and no revision before the running one is kept.
    #[error("no revision before {running} is kept: nothing to roll back to")]
    NothingBefore {
        /// The running revision.
        running: u64,
    },
    /// `--rollback N` names a revision that is not kept.
    #[error("revision {revision} is not kept under {prefix} (kept: {kept})")]
    NotKept {
        /// The revision asked for.
        revision: u64,
        /// The key prefix.
        prefix: String,
        /// The kept revisions, `A..B`, `A` or `none`.
        kept: String,
    },
    /// The simulator, asked for the shares before and after (`--dry-run`).
    #[error("sim: {0}")]
    Sim(#[from] sim::Error),
}

impl Classified for Error {
    fn class(&self) -> Option<Class> {
        match self {
            Error::Store(e) => e.class(),
            _ => None,
        }
    }
}

/// As a `dyn Error`, for [`super::describe`].
impl AsRef<dyn std::error::Error + Send + Sync + 'static> for Error {
    fn as_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }
}

type Result<T, E = Error> = std::result::Result<T, E>;

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
    /// What the pusher says of the revision (`-m`), stored with it; empty: nothing.
    pub message: String,
    /// With a ramp running (`gtd push --ramp`): stop it where it is and publish (else the push
    /// is refused, status 2).
    pub force: bool,
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
    let mut draft = super::draft(&cfg).map_err(|e| Error::Read(format!("{e:#}")))?;
    draft.message = opts.message.clone();
    // What is published is the text just read: validate exactly it (an edit between the two
    // reads would otherwise slip through).
    let catalog = config::parse_catalog(
        &draft.catalog,
        cfg.catalog_file.as_deref().unwrap_or(Path::new("")),
    )
    .map_err(Error::Catalog)?;
    if let Err(errors) = config::parse(&draft.config, &opts.config, &catalog) {
        return Ok(Outcome::refused(refusal(&errors, &opts.config)));
    }
    let mut warnings = String::new();
    for w in &cfg.warnings {
        warnings.push_str(&format!("warning: {w}\n"));
    }
    let mut store = Store::connect(&opts.etcd, &opts.prefix)
        .await
        .map_err(Error::Store)?;
    let seen = store.current().await.map_err(Error::Store)?;
    let running = store.named(seen.number).await.map_err(Error::Store)?;
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
        out.insert_str(0, &ramp_note(&store, opts.force).await?);
        if let Some(r) = &running {
            out.push_str(&text_diff(r, &draft, &format!("{}", opts.config.display())));
            out.push('\n');
            let nodes = store.nodes().await.map_err(Error::Store)?;
            let (drains, _) = store.drains().await.map_err(Error::Store)?;
            out.push_str(&super::predict::predicted(
                cfg,
                opts.config.display().to_string(),
                r,
                &nodes,
                &drains,
            )?);
        } else {
            let request = sim::Request::new(sim::Source::Loaded {
                config: Box::new(cfg),
                name: opts.config.display().to_string(),
            });
            out.push_str(&sim::run(&request, &mut Vec::new())?.text);
        }
        let mut o = Outcome::ok(out);
        o.err = warnings;
        return Ok(o);
    }
    let (published, stopped) = match publish_guarded(&mut store, seen, draft, opts).await? {
        Ok(p) => p,
        Err(o) => return Ok(o),
    };
    let mut o = Outcome::ok(stopped + &published_line(&mut store, &published).await?);
    o.err = warnings;
    Ok(o)
}

/// Publishes `draft` after `seen` beside the fleet's ramp ([`beside_ramp`]): the revision and
/// what was said of a ramp `--force` stopped, or the outcome to end with (refused, raced).
async fn publish_guarded(
    store: &mut Store,
    seen: super::Current,
    draft: Revision,
    opts: &Options,
) -> Result<std::result::Result<(Revision, String), Outcome>> {
    let (beside, stopped) = match beside_ramp(store, opts.force, seen.number + 1).await? {
        Ok(b) => b,
        Err(refused) => return Ok(Err(refused)),
    };
    match store.publish_beside(seen, draft, opts.keep, beside).await {
        Ok(p) => Ok(Ok((p, stopped))),
        Err(e) => raced(store, e).await.map(Err),
    }
}

/// `--dry-run`'s first line while a ramp runs: what the push would do about it.
async fn ramp_note(store: &Store, force: bool) -> Result<String> {
    Ok(match record::read(store).await.map_err(Error::Store)? {
        Some((rec, _)) if !rec.state.done() => format!(
            "ramp {} is {} (step {}/{}): {}\n",
            rec.id,
            rec.state.word(),
            rec.at,
            rec.steps.len(),
            if force {
                "--force would stop it where it is and publish this"
            } else {
                "this push would be refused until it ends (gtd ramp abort, or --force)"
            }
        ),
        _ => String::new(),
    })
}

/// A plain push beside the fleet's ramp (issue 38): refused (status 2, nothing published)
/// while a ramp is not over, for its driving node would judge and step a fleet no longer on
/// its plan; with `--force` the ramp is stopped where it is in the publish's transaction (as
/// revision `next`), which says so. Either way the publish holds only if the ramp's record is
/// still as read (a ramp stored meanwhile refuses it): `Ok` the transaction's part and what to
/// say, `Err` the refusal.
async fn beside_ramp(
    store: &Store,
    force: bool,
    next: u64,
) -> Result<Result<(crate::Beside, String), Outcome>> {
    let (rec, seen) = match record::read(store).await.map_err(Error::Store)? {
        Some((rec, seen)) => (Some(rec), seen),
        None => (None, 0),
    };
    let mut beside = crate::Beside {
        compare: vec![record::unchanged(store, seen)],
        ops: Vec::new(),
    };
    let Some(mut rec) = rec.filter(|r| !r.state.done()) else {
        return Ok(Ok((beside, String::new())));
    };
    if !force {
        return Ok(Err(ramp_refusal(&rec)));
    }
    let said = format!(
        "ramp {} stopped at step {}/{} (revision {}), not going back: this push replaces it\n",
        rec.id,
        rec.at,
        rec.steps.len(),
        rec.revision
    );
    rec.replaced(&super::who(), next);
    beside
        .ops
        .push(record::put(store, &rec).map_err(Error::Store)?);
    Ok(Ok((beside, said)))
}

/// The refusal of a plain push while `rec` is not over.
fn ramp_refusal(rec: &record::Record) -> Outcome {
    Outcome {
        out: String::new(),
        err: format!(
            "gtd push: refused: ramp {} is {} (step {}/{}, revision {}, started from revision \
             {}, driven by {}): a push now would publish under it, and its driving node would \
             judge and step a fleet no longer on its plan. See it with gtd ramp status; end it \
             with gtd ramp abort (the fleet goes back to revision {}'s config) and push again, \
             or push with --force to stop it where it is and publish this; nothing was \
             published\n",
            rec.id,
            rec.state.word(),
            rec.at,
            rec.steps.len(),
            rec.revision,
            rec.start_revision,
            rec.owner.as_deref().unwrap_or("no node yet"),
            rec.start_revision
        ),
        code: REFUSED,
    }
}

/// A publish that did not hold: refused when a ramp was stored meanwhile, else the error.
async fn raced(store: &Store, e: super::Error) -> Result<Outcome> {
    if matches!(e, super::Error::Conflict(_))
        && let Some((rec, _)) = record::read(store).await.map_err(Error::Store)?
        && !rec.state.done()
    {
        return Ok(ramp_refusal(&rec));
    }
    Err(Error::Store(e))
}

/// `gtd push --rollback [REV]`: republishes a kept revision's text as a new revision.
async fn rollback(opts: &Options) -> Result<Outcome> {
    let mut store = Store::connect(&opts.etcd, &opts.prefix)
        .await
        .map_err(Error::Store)?;
    let seen = store.current().await.map_err(Error::Store)?;
    let Some(running) = store.named(seen.number).await.map_err(Error::Store)? else {
        return Err(Error::NothingPublished {
            prefix: store.prefix().to_owned(),
        });
    };
    let kept = store.kept().await.map_err(Error::Store)?;
    let target = match opts.rollback.flatten() {
        Some(n) => n,
        None => {
            *kept
                .iter()
                .rev()
                .find(|&&n| n < running.revision)
                .ok_or(Error::NothingBefore {
                    running: running.revision,
                })?
        }
    };
    let Some(old) = store.revision(target).await.map_err(Error::Store)? else {
        return Err(Error::NotKept {
            revision: target,
            prefix: store.prefix().to_owned(),
            kept: numbers(&kept),
        });
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
            "{}dry run: revision {} (running) -> revision {target}'s config; nothing published\n\n",
            ramp_note(&store, opts.force).await?,
            running.revision
        );
        out.push_str(&text_diff(&running, &old, &format!("revision {target}")));
        out.push('\n');
        let name = old.config_file().display().to_string();
        let nodes = store.nodes().await.map_err(Error::Store)?;
        let (drains, _) = store.drains().await.map_err(Error::Store)?;
        out.push_str(&super::predict::predicted(
            validated(&old)?,
            name,
            &running,
            &nodes,
            &drains,
        )?);
        return Ok(Outcome::ok(out));
    }
    let draft = Revision {
        revision: 0,
        pushed_at_ms: super::now_ms(),
        pushed_by: super::who(),
        rollback_of: Some(target),
        message: opts.message.clone(),
        ..old
    };
    let (published, stopped) = match publish_guarded(&mut store, seen, draft, opts).await? {
        Ok(p) => p,
        Err(o) => return Ok(o),
    };
    Ok(Outcome::ok(
        stopped + &published_line(&mut store, &published).await?,
    ))
}

/// The running revision's document (`None` before the first push).
async fn published_line(store: &mut Store, r: &Revision) -> Result<String> {
    let kept = store.kept().await.map_err(Error::Store)?;
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
