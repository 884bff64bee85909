//! What a call does: results, streaming, errors, caching, limits, environment.

mod bundles;
mod confinement;
mod egress;
mod results;
