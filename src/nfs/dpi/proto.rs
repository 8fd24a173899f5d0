//! The application protocols the DPI engine names. `name()` is nDPI's spelling, so labels
//! compare directly with ndpiReader's output.

macro_rules! protos {
    ($($v:ident => $n:literal),* $(,)?) => {
        /// An application protocol found by payload inspection (or, for the IP-level
        /// ones, by the IP protocol number).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum AppProto { $($v),* }

        impl AppProto {
            pub const ALL: &'static [AppProto] = &[$(AppProto::$v),*];

            /// nDPI's name for the protocol (e.g. `FTP_CONTROL`, `SMBv23`, `Jabber`).
            pub fn name(self) -> &'static str {
                match self { $(AppProto::$v => $n),* }
            }
        }
    };
}

protos! {
    Http => "HTTP",
    HttpConnect => "HTTP_Connect",
    Tls => "TLS",
    Dtls => "DTLS",
    Dns => "DNS",
    Mdns => "MDNS",
    Llmnr => "LLMNR",
    NetBios => "NetBIOS",
    DnsCrypt => "DNScrypt",
    Quic => "QUIC",
    Ssh => "SSH",
    Smtp => "SMTP",
    Smtps => "SMTPS",
    Pop3 => "POP3",
    Pops => "POPS",
    Imap => "IMAP",
    Imaps => "IMAPS",
    Ftp => "FTP_CONTROL",
    Sip => "SIP",
    Rtp => "RTP",
    Rtcp => "RTCP",
    Stun => "STUN",
    BitTorrent => "BitTorrent",
    Gnutella => "Gnutella",
    Smb1 => "SMBv1",
    Smb => "SMBv23",
    Rdp => "RDP",
    Ntp => "NTP",
    Dhcp => "DHCP",
    Dhcpv6 => "DHCPV6",
    Mqtt => "MQTT",
    Modbus => "Modbus",
    Dnp3 => "DNP3",
    Iec104 => "IEC60870",
    S7comm => "S7Comm",
    Bacnet => "BACnet",
    Snmp => "SNMP",
    Syslog => "Syslog",
    Telnet => "Telnet",
    Irc => "IRC",
    Xmpp => "Jabber",
    Rtsp => "RTSP",
    Ssdp => "SSDP",
    Kerberos => "Kerberos",
    Ldap => "LDAP",
    MySql => "MySQL",
    PostgreSql => "PostgreSQL",
    Redis => "RESP",
    MongoDb => "MongoDB",
    MsSql => "MsSQL-TDS",
    Memcached => "Memcached",
    Tftp => "TFTP",
    Radius => "Radius",
    Slp => "Service_Location_Protocol",
    OpenVpn => "OpenVPN",
    WireGuard => "WireGuard",
    Ipsec => "IPSec",
    Vnc => "VNC",
    Zabbix => "Zabbix",
    Nfs => "NFS",
    Bgp => "BGP",
    Ajp => "AJP",
    Coap => "COAP",
    SourceEngine => "Source_Engine",
    Dropbox => "Dropbox",
    Bjnp => "BJNP",
    Ubntac2 => "UBNTAC2",
    TplinkShp => "TPLINK_SHP",
    Hsrp => "HSRP",
    NatPmp => "NAT-PMP",
    Teredo => "Teredo",
    Rmcp => "RMCP",
    Collectd => "collectd",
    Mgcp => "MGCP",
    Socks => "SOCKS",
    Rtmp => "RTMP",
    WhatsApp => "WhatsApp",
    Spotify => "Spotify",
    RakNet => "RakNet",
    TuyaLp => "TuyaLP",
    Fix => "FIX",
    Discord => "Discord",
    Oicq => "OICQ",
    Icmp => "ICMP",
    Icmpv6 => "ICMPV6",
    Igmp => "IGMP",
    Ospf => "OSPF",
    Vrrp => "VRRP",
    Pim => "IP_PIM",
    Sctp => "SCTP",
}

impl AppProto {
    /// The protocol with nDPI name `s`, if we know it.
    pub fn from_name(s: &str) -> Option<AppProto> {
        AppProto::ALL.iter().copied().find(|p| p.name() == s)
    }

    /// Bit of this protocol in a 128-bit set.
    #[inline]
    pub(crate) fn bit(self) -> u128 {
        1u128 << (self as u8)
    }
}

impl std::fmt::Display for AppProto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_fit_the_set() {
        assert!(AppProto::ALL.len() <= 128);
        for p in AppProto::ALL {
            assert_eq!(AppProto::from_name(p.name()), Some(*p));
        }
        assert_eq!(AppProto::from_name("FTP_CONTROL"), Some(AppProto::Ftp));
        assert_eq!(AppProto::from_name("nope"), None);
    }
}
