//! Repository rules.
use std::path::Path;

use anyhow::Result;

pub(crate) fn run(_root: &Path) -> Result<()> {
    Ok(())
}
