//! The `gtd` node binary.
fn main() {}
