//! NF kinds by config name, with their parameter docs, for `run`, `check` and `nfs`.

use std::path::Path;

use super::params::{ParamDoc, ParamError, Params};
use super::{
    Busy, Firewall, FlowMonitor, IpFilter, Ipv4Switch, MacSwitch, Maglev, Microbox, Nat, Nf,
    Pipeline, Wire,
};

pub struct Kind {
    pub name: &'static str,
    pub summary: &'static str,
    pub params: &'static [ParamDoc],
    pub build: fn(&mut Params) -> Result<Box<dyn Nf>, ParamError>,
}

pub const KINDS: &[Kind] = &[
    Kind {
        name: "wire",
        summary: "Freeflow wire: a packet entering on port 2k leaves on 2k+1 and vice versa",
        params: Wire::PARAMS,
        build: |p| Ok(Box::new(Wire::from_params(p)?)),
    },
    Kind {
        name: "mac_switch",
        summary: "MAC learning switch: learn source MAC -> ingress port, forward by destination MAC, flood on miss",
        params: MacSwitch::PARAMS,
        build: |p| Ok(Box::new(MacSwitch::from_params(p)?)),
    },
    Kind {
        name: "ipv4_switch",
        summary: "IPv4 learning switch: learn source address -> ingress port, forward by destination address, flood on miss",
        params: Ipv4Switch::PARAMS,
        build: |p| Ok(Box::new(Ipv4Switch::from_params(p)?)),
    },
    Kind {
        name: "firewall",
        summary: "Stateless firewall: passes TCP/UDP with a source or destination port in the list, then switches like ipv4_switch",
        params: Firewall::PARAMS,
        build: |p| Ok(Box::new(Firewall::from_params(p)?)),
    },
    Kind {
        name: "ip_filter",
        summary: "IP filter (ACL): ordered allow/deny rules in tcpdump-like syntax, first match wins, then a default",
        params: IpFilter::PARAMS,
        build: |p| Ok(Box::new(IpFilter::from_params(p)?)),
    },
    Kind {
        name: "nat",
        summary: "Source NAT with MazuNAT's semantics: inside flows get a public (address, port), exact replies are translated back, the rest dropped",
        params: Nat::PARAMS,
        build: |p| Ok(Box::new(Nat::from_params(p)?)),
    },
    Kind {
        name: "maglev",
        summary: "Maglev load balancer: packets to the VIP go to a backend by consistent hashing, per-flow tracked; destination IP (and MAC) rewritten",
        params: Maglev::PARAMS,
        build: |p| Ok(Box::new(Maglev::from_params(p)?)),
    },
    Kind {
        name: "flow_monitor",
        summary: "Flow monitor: per-connection packets, bytes, first/last seen and TCP flags, exported on idle timeout and at the end; never drops",
        params: FlowMonitor::PARAMS,
        build: |p| Ok(Box::new(FlowMonitor::from_params(p)?)),
    },
    Kind {
        name: "microbox",
        summary: "Consolidated TCP stack (Microboxes) with apps on its events: tcp_count, l4_lb, l7_lb, …; mode = \"per-nf\" gives each app its own stack",
        params: Microbox::PARAMS,
        build: |p| Ok(Box::new(Microbox::from_params(p)?)),
    },
    Kind {
        name: "pipeline",
        summary: "A match-action program in the pipeline language (docs/pipeline.md): program = \"file.stv\" plus the program's own params",
        params: Pipeline::PARAMS,
        build: |p| Ok(Box::new(Pipeline::from_params(p)?)),
    },
    Kind {
        name: "busy",
        summary: "Busy NF for experiments: spends `cycles` TSC ticks per packet reading (and storing back) the fields it declares; never drops",
        params: Busy::PARAMS,
        build: |p| Ok(Box::new(Busy::from_params(p)?)),
    },
];

pub fn find(name: &str) -> Option<&'static Kind> {
    KINDS.iter().find(|k| k.name == name)
}

/// Builds an NF of `kind` named `nf` from its parameter table (without `name`/`kind`).
pub fn build(nf: &str, kind: &str, table: &toml::Table) -> Result<Box<dyn Nf>, ParamError> {
    build_in(nf, kind, table, Path::new(""))
}

/// As [`build`], with relative file parameters taken from `dir` (the chain file's folder).
pub fn build_in(
    nf: &str,
    kind: &str,
    table: &toml::Table,
    dir: &Path,
) -> Result<Box<dyn Nf>, ParamError> {
    let Some(k) = find(kind) else {
        let names: Vec<&str> = KINDS.iter().map(|k| k.name).collect();
        return Err(ParamError {
            nf: nf.to_string(),
            msg: format!("unknown kind `{kind}` (known: {})", names.join(", ")),
        });
    };
    let mut p = Params::new(nf, table).in_dir(dir);
    let built = (k.build)(&mut p)?;
    p.finish(k.params)?;
    Ok(built)
}
