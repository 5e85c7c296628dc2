//! Field ownership (`managedFields`) and server-side apply.

pub mod apply;
pub mod diff;
pub mod fieldset;
pub mod managed;
pub mod merge;
pub mod track;
