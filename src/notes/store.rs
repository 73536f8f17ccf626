//! The notes journal in `state_dir/notes/` (being written).
