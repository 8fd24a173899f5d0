//! Rule variables (`$HOME_NET`, `$HTTP_PORTS`, …): names resolved when rules are parsed.

use std::collections::HashMap;

/// Address and port groups, as in suricata.yaml's `vars:` section.
#[derive(Clone, Debug, Default)]
pub struct Vars {
    addr: HashMap<String, String>,
    port: HashMap<String, String>,
}

impl Vars {
    /// No variables: any `$NAME` in a rule makes it skipped with a warning.
    pub fn empty() -> Vars {
        Vars::default()
    }

    /// The defaults of Suricata's shipped suricata.yaml, which suricata-verify relies on.
    pub fn suricata_defaults() -> Vars {
        let mut v = Vars::empty();
        v.set_addr("HOME_NET", "[192.168.0.0/16,10.0.0.0/8,172.16.0.0/12]");
        v.set_addr("EXTERNAL_NET", "!$HOME_NET");
        for n in [
            "HTTP_SERVERS",
            "SMTP_SERVERS",
            "SQL_SERVERS",
            "DNS_SERVERS",
            "TELNET_SERVERS",
            "AIM_SERVERS",
            "DC_SERVERS",
            "DNP3_SERVER",
            "DNP3_CLIENT",
            "MODBUS_CLIENT",
            "MODBUS_SERVER",
            "ENIP_CLIENT",
            "ENIP_SERVER",
        ] {
            v.set_addr(n, "$HOME_NET");
        }
        v.set_port("HTTP_PORTS", "80");
        v.set_port("SHELLCODE_PORTS", "!80");
        v.set_port("ORACLE_PORTS", "1521");
        v.set_port("SSH_PORTS", "22");
        v.set_port("DNP3_PORTS", "20000");
        v.set_port("MODBUS_PORTS", "502");
        v.set_port("FILE_DATA_PORTS", "[$HTTP_PORTS,110,143]");
        v.set_port("FTP_PORTS", "21");
        v.set_port("GENEVE_PORTS", "6081");
        v.set_port("VXLAN_PORTS", "4789");
        v.set_port("TEREDO_PORTS", "3544");
        v
    }

    pub fn set_addr(&mut self, name: &str, value: &str) {
        self.addr.insert(name.to_string(), value.to_string());
    }

    pub fn set_port(&mut self, name: &str, value: &str) {
        self.port.insert(name.to_string(), value.to_string());
    }

    pub(crate) fn addr(&self, name: &str) -> Option<&str> {
        self.addr.get(name).map(String::as_str)
    }

    pub(crate) fn port(&self, name: &str) -> Option<&str> {
        self.port.get(name).map(String::as_str)
    }
}
