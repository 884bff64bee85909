//! Which IP addresses count as public: the one classifier every outbound
//! path (model calls, built-in tools, the runners' egress proxy) shares.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `ip` is a public unicast address.
///
/// IPv4: everything but this-network, private, shared (CGNAT), loopback,
/// link-local, IETF protocol, documentation, benchmarking, multicast,
/// reserved and broadcast ranges. IPv6: only global unicast (`2000::/3`),
/// minus documentation, 6to4 (`2002::/16`) and Teredo (`2001::/32`), which
/// are denied entirely; IPv4-mapped (`::ffff:0:0/96`) and NAT64
/// (`64:ff9b::/96`) addresses are judged by the IPv4 address they embed.
/// IPv4-compatible (`::/96`), loopback, unspecified, unique-local,
/// link-local and multicast addresses lie outside `2000::/3`.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => is_public_v4(ip),
        IpAddr::V6(ip) => is_public_v6(ip),
    }
}

/// Non-public IPv4 networks, as (network, prefix length).
const DENIED_V4: [(Ipv4Addr, u32); 14] = [
    (Ipv4Addr::new(0, 0, 0, 0), 8),
    (Ipv4Addr::new(10, 0, 0, 0), 8),
    (Ipv4Addr::new(100, 64, 0, 0), 10),
    (Ipv4Addr::new(127, 0, 0, 0), 8),
    (Ipv4Addr::new(169, 254, 0, 0), 16),
    (Ipv4Addr::new(172, 16, 0, 0), 12),
    (Ipv4Addr::new(192, 0, 0, 0), 24),
    (Ipv4Addr::new(192, 0, 2, 0), 24),
    (Ipv4Addr::new(192, 168, 0, 0), 16),
    (Ipv4Addr::new(198, 18, 0, 0), 15),
    (Ipv4Addr::new(198, 51, 100, 0), 24),
    (Ipv4Addr::new(203, 0, 113, 0), 24),
    (Ipv4Addr::new(224, 0, 0, 0), 4),
    (Ipv4Addr::new(240, 0, 0, 0), 4),
];

/// IPv6 global unicast, the only IPv6 space that can be public.
const GLOBAL_V6: (Ipv6Addr, u32) = (Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3);

/// Non-public networks inside IPv6 global unicast.
const DENIED_V6: [(Ipv6Addr, u32); 3] = [
    (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32),
    (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32),
    (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16),
];

/// The NAT64 well-known prefix, `64:ff9b::/96`.
const NAT64_V6: (Ipv6Addr, u32) = (Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96);

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let bits = u32::from(ip);
    !DENIED_V4
        .iter()
        .any(|&(net, len)| bits >> (32 - len) == u32::from(net) >> (32 - len))
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = embedded_v4(ip) {
        return is_public_v4(v4);
    }
    in_v6(ip, GLOBAL_V6) && !DENIED_V6.iter().any(|&net| in_v6(ip, net))
}

/// The IPv4 address of an IPv4-mapped or NAT64 address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if in_v6(ip, NAT64_V6) {
        let [.., a, b, c, d] = ip.octets();
        return Some(Ipv4Addr::new(a, b, c, d));
    }
    ip.to_ipv4_mapped()
}

fn in_v6(ip: Ipv6Addr, (net, len): (Ipv6Addr, u32)) -> bool {
    u128::from(ip) >> (128 - len) == u128::from(net) >> (128 - len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_unicast_addresses_are_public() {
        let table = [
            ("8.8.8.8", true),
            ("1.1.1.1", true),
            ("100.63.255.255", true),
            ("100.128.0.1", true),
            ("172.15.255.255", true),
            ("172.32.0.1", true),
            ("192.0.1.1", true),
            ("198.17.255.255", true),
            ("198.20.0.1", true),
            ("223.255.255.255", true),
            ("0.0.0.0", false),
            ("0.1.2.3", false),
            ("10.1.2.3", false),
            ("100.64.0.1", false),
            ("100.127.255.255", false),
            ("127.0.0.1", false),
            ("127.255.0.9", false),
            ("169.254.169.254", false),
            ("172.16.0.1", false),
            ("172.31.255.255", false),
            ("192.0.0.8", false),
            ("192.0.2.1", false),
            ("192.168.1.1", false),
            ("198.18.0.1", false),
            ("198.19.255.255", false),
            ("198.51.100.7", false),
            ("203.0.113.9", false),
            ("224.0.0.1", false),
            ("239.255.255.250", false),
            ("240.0.0.1", false),
            ("255.255.255.255", false),
            ("2606:4700::1111", true),
            ("2a00:1450:4001::200e", true),
            ("::ffff:8.8.8.8", true),
            ("64:ff9b::808:808", true),
            ("::", false),
            ("::1", false),
            ("fc00::1", false),
            ("fd12:3456::1", false),
            ("fe80::1", false),
            ("ff02::1", false),
            ("2001:db8::1", false),
            ("::ffff:127.0.0.1", false),
            ("::ffff:10.0.0.1", false),
            ("::ffff:169.254.169.254", false),
            ("::8.8.8.8", false),
            ("::127.0.0.1", false),
            ("64:ff9b::a00:1", false),
            ("64:ff9b::7f00:1", false),
            ("2002:808:808::1", false),
            ("2002:a00:1::", false),
            ("2001:0:4136:e378::1", false),
        ];
        for (ip, public) in table {
            assert_eq!(is_public(ip.parse().unwrap()), public, "{ip}");
        }
    }
}
