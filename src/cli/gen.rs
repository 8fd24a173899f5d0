//! `catena gen`: synthetic traces shaped like the papers' traces, deterministic by seed.

use std::path::PathBuf;

use anyhow::Context as _;
use catena::io::gen::{generate, GenOptions, Profile, SizeModel};
use catena::io::PcapWriter;

/// Write a synthetic trace (Ethernet/IPv4/IPv6, TCP/UDP/ICMP, valid checksums) to a pcap.
///
/// A profile sets every option to the shape of a paper's trace; the other flags override
/// single options. The same options and seed always give the same bytes.
#[derive(clap::Args)]
pub struct Args {
    /// Output pcap file.
    #[arg(short, long)]
    output: PathBuf,
    /// smallflows (14,261 pkts, 646 B avg, web), bigflows (791,615 pkts, 449 B),
    /// 4sics (2,274,747 pkts, 76 B, ICS), or http (HTTP/1.1 connections: -n is the
    /// number of connections, --response-bytes the body size).
    #[arg(short, long, default_value = "smallflows")]
    profile: String,
    /// With `--profile http`: response body bytes (e.g. 64 or 8192).
    #[arg(long, default_value_t = 8192)]
    response_bytes: usize,
    /// Number of packets.
    #[arg(short = 'n', long)]
    count: Option<usize>,
    /// Every frame this many bytes.
    #[arg(long, conflicts_with_all = ["avg_size", "sizes"])]
    size: Option<usize>,
    /// A realistic bimodal mix with this mean frame size.
    #[arg(long, conflicts_with = "sizes")]
    avg_size: Option<usize>,
    /// Weighted sizes, e.g. `64:7,570:4,1518:1` (IMIX).
    #[arg(long)]
    sizes: Option<String>,
    /// Number of flows.
    #[arg(long)]
    flows: Option<usize>,
    /// Number of hosts (MAC/IP pairs).
    #[arg(long)]
    hosts: Option<usize>,
    /// Share of packets that are TCP (0..1).
    #[arg(long)]
    tcp: Option<f64>,
    /// Share of packets that are UDP (0..1); the rest is ICMP.
    #[arg(long)]
    udp: Option<f64>,
    /// Share of packets on ports 80/443 (0..1).
    #[arg(long)]
    web: Option<f64>,
    /// Share of flows over IPv6 (0..1).
    #[arg(long)]
    ipv6: Option<f64>,
    /// Seed: the same seed and options give the same trace.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Packets per second of capture time (timestamp spacing).
    #[arg(long)]
    rate: Option<f64>,
}

fn parse_sizes(s: &str) -> anyhow::Result<Vec<(usize, f64)>> {
    s.split(',')
        .map(|part| {
            let (size, w) = part.split_once(':').unwrap_or((part, "1"));
            let size: usize = size
                .trim()
                .parse()
                .with_context(|| format!("--sizes: bad size `{size}`"))?;
            let w: f64 = w
                .trim()
                .parse()
                .with_context(|| format!("--sizes: bad weight `{w}`"))?;
            Ok((size, w))
        })
        .collect()
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    if a.profile == "http" {
        let o = catena::io::gen_http::HttpGenOptions {
            connections: a.count.unwrap_or(1000),
            response_bytes: a.response_bytes,
            seed: a.seed,
            ..Default::default()
        };
        let t = catena::io::gen_http::generate_http(&o).map_err(|e| anyhow::anyhow!("gen: {e}"))?;
        t.write_pcap(&a.output)
            .map_err(|e| anyhow::anyhow!("{}: {e}", a.output.display()))?;
        eprintln!(
            "wrote {} packets ({} HTTP connections, {} B responses) to {}",
            t.len(),
            o.connections,
            o.response_bytes,
            a.output.display()
        );
        return Ok(0);
    }
    let profile: Profile = a
        .profile
        .parse()
        .map_err(|e: String| anyhow::anyhow!("{e}"))?;
    let mut o = GenOptions::profile(profile);
    o.seed = a.seed;
    if let Some(n) = a.count {
        o.count = n;
    }
    if let Some(s) = a.size {
        o.sizes = SizeModel::Fixed(s);
    }
    if let Some(s) = a.avg_size {
        o.sizes = SizeModel::Average(s);
    }
    if let Some(s) = &a.sizes {
        o.sizes = SizeModel::Mix(parse_sizes(s)?);
    }
    macro_rules! set {
        ($($f:ident => $field:ident),*) => { $(if let Some(v) = a.$f { o.$field = v; })* };
    }
    set!(flows => flows, hosts => hosts, tcp => tcp_share, udp => udp_share, web => web_share, ipv6 => ipv6_share, rate => rate_pps);
    let trace = generate(&o).map_err(|e| anyhow::anyhow!("gen: {e}"))?;
    let mut w = PcapWriter::create(&a.output, trace.header())
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.output.display()))?;
    for i in 0..trace.len() {
        let r = trace.record(i);
        w.write_packet(r.ts_ns, r.wire_len, trace.packet(i))
            .map_err(|e| anyhow::anyhow!("{}: {e}", a.output.display()))?;
    }
    w.finish()
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.output.display()))?;
    let avg = trace.total_bytes() as f64 / trace.len().max(1) as f64;
    eprintln!(
        "wrote {} packets ({:.1} B average, profile {profile}, seed {}) to {}",
        trace.len(),
        avg,
        a.seed,
        a.output.display()
    );
    Ok(0)
}
