//! Inside a group: balancing methods (SPEC 4). Being written.
