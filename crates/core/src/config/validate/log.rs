//! `[log]`: where the access log (HTTP requests, TCP connections, UDP flows) goes (`access = "off" | "stderr" | "stdout" | PATH`).

use super::Env;
use crate::config::document::{Ctx, Table};
use crate::config::error::position;
use crate::config::model::{AccessFile, AccessLog, Log};

pub(super) fn log(ctx: &mut Ctx<'_>, env: &Env<'_>, root: &Table<'_, '_>) -> Log {
    let Some(t) = root.table(ctx, "log", "log".to_owned()) else {
        return Log::default();
    };
    t.check_keys(ctx, &["access"]);
    let access = match t.nonempty_str(ctx, "access") {
        None => AccessLog::Off,
        Some(s) => match s.v {
            "off" => AccessLog::Off,
            "stderr" => AccessLog::Stderr,
            "stdout" => AccessLog::Stdout,
            written => {
                let (line, column) = position(ctx.text(), s.at);
                let file = AccessFile {
                    path: env.base.join(written),
                    config: ctx.file().to_path_buf(),
                    line,
                    column,
                };
                // Told now, at the key, rather than only when the node opens it (which reports
                // a failure at the same place, see AccessFile::error).
                match crate::files::appendable(&file.path) {
                    Ok(()) => AccessLog::File(file),
                    Err(problem) => {
                        ctx.error(s.at, &t.path, file.error(problem).message);
                        AccessLog::Off
                    }
                }
            }
        },
    };
    Log { access }
}
