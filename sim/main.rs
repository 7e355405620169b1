//! The `sim` what-if simulator.
fn main() {}
