//! `catena nfs`: the NF kinds and their parameters.

use catena::nfs::registry::KINDS;

/// List the NF kinds a chain can use, with their parameters.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_: Args) -> anyhow::Result<i32> {
    for k in KINDS {
        println!("{}\n    {}", k.name, k.summary);
        for p in k.params {
            println!(
                "    {:<12} {:<20} default {:<12} {}",
                p.name, p.ty, p.default, p.doc
            );
        }
        if k.name == "microbox" {
            for a in catena::nfs::microbox::APPS {
                println!("    app {}: {}", a.name, a.summary);
                for p in a.params {
                    println!(
                        "        {:<10} {:<20} default {:<12} {}",
                        p.name, p.ty, p.default, p.doc
                    );
                }
            }
        }
        println!();
    }
    Ok(0)
}
