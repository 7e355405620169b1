//! Two revisions side by side, for `gtd push --dry-run`, `gtd fleet diff` and `gtd fleet
//! history`: their texts' unified diff, each validated as a node loads it, and the shares
//! before and after from the simulator. Below its users (push, predict, report, history); it
//! reads only revisions and drains.

use super::Revision;
use super::drain::{self, Drain};
use gtd_core::config::{self, Config};
use gtd_sim as sim;

/// A unified diff of two revisions' config and catalogue texts (empty parts left out).
pub(crate) fn text_diff(old: &Revision, new: &Revision, new_name: &str) -> String {
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

/// The shares before and after, as `sim --config NEW --compare OLD` prints them, from the
/// simulator in this process: `old`'s text validated with `new`'s catalogue, relative paths in
/// it against the working directory (as a node reads a revision), and nothing written.
pub(crate) fn shares(
    mut new: Config,
    new_name: String,
    old: &Revision,
    drains: &[Drain],
) -> Result<String, sim::Error> {
    let file = old.config_file();
    let mut before = config::parse(&old.config, &file, &new.catalog).map_err(|errors| {
        sim::Error::Compare(Box::new(sim::Error::Config(errors.report(&file))))
    })?;
    drain::apply(&mut new, drains);
    drain::apply(&mut before, drains);
    let mut request = sim::Request::new(sim::Source::Loaded {
        config: Box::new(new),
        name: new_name,
    });
    request.compare = Some(sim::Source::Loaded {
        config: Box::new(before),
        name: file.display().to_string(),
    });
    Ok(sim::run(&request, &mut Vec::new())?.text)
}

/// A kept revision's config validated as a node loads it, for the simulator.
pub(crate) fn validated(r: &Revision) -> Result<Config, sim::Error> {
    r.validate()
        .map_err(|errors| sim::Error::Config(errors.report(&r.config_file())))
}
