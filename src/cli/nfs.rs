//! `catena nfs`: the NF kinds and their parameters.

use catena::nfs::registry::KINDS;

/// List the NF kinds a chain can use, with their parameters.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_: Args) -> anyhow::Result<i32> {
    for k in KINDS {
        outln!("{}\n    {}", k.name, k.summary)?;
        for p in k.params {
            outln!(
                "    {:<12} {:<20} default {:<12} {}",
                p.name,
                p.ty,
                p.default,
                p.doc
            )?;
        }
        if k.name == "microbox" {
            for a in catena::nfs::microbox::APPS {
                outln!("    app {}: {}", a.name, a.summary)?;
                for p in a.params {
                    outln!(
                        "        {:<10} {:<20} default {:<12} {}",
                        p.name,
                        p.ty,
                        p.default,
                        p.doc
                    )?;
                }
            }
        }
        outln!("")?;
    }
    Ok(0)
}
