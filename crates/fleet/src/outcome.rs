//! What a fleet command (`gtd push`, `gtd drain`, `gtd fleet forget`) prints and its exit
//! status: a leaf its commands share.

/// The exit status of a command refused before it changed anything (a ramp that may not
/// start, a push while a ramp runs): nothing was published.
pub const REFUSED: u8 = 2;

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
    pub(crate) fn ok(out: String) -> Outcome {
        Outcome {
            out,
            err: String::new(),
            code: 0,
        }
    }

    pub(crate) fn refused(err: String) -> Outcome {
        Outcome {
            out: String::new(),
            err,
            code: 1,
        }
    }
}
