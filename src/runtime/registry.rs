//! The one list of runtimes. Each runtime's folder has a `register` that adds the kinds it
//! serves to a [`Registry`]; [`REGISTERED`] is every runtime of this build, so a new runtime
//! is its folder plus one line here. A test builds its own registry from the test double's
//! `register` (`runtime/fake/`).

use super::registration::Registry;
use crate::store::PaddockHome;

/// One runtime's registration.
pub type Register<'a> = &'a (dyn Fn(&mut Registry, &PaddockHome) + Sync);

/// Every runtime of this build.
pub const REGISTERED: &[Register<'static>] = &[
    &super::docker::register,
    &super::microvm::register,
    &super::process::register,
];
