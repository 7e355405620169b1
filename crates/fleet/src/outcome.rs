//! What a fleet command (`gtd push`, `gtd drain`, `gtd fleet forget`) prints and its exit
//! status: a leaf its commands share.

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
