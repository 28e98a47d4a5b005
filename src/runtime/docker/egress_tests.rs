//! Unit tests of `egress.rs`: job subnets.

use super::*;

#[test]
fn job_subnets_stay_in_the_range_and_keep_the_proxy_out_of_docker_s_share() {
    let last = JobSubnet::nth(SUBNET_COUNT - 1);
    assert_eq!(last.cidr(), "198.19.255.240/28");
    assert_eq!(
        JobSubnet::nth(SUBNET_COUNT),
        JobSubnet::nth(0),
        "wraps around"
    );
    let subnet = JobSubnet::nth(5);
    assert_eq!(subnet.cidr(), "198.18.0.80/28");
    assert_eq!(subnet.proxy(), Ipv4Addr::new(198, 18, 0, 82));
    let ipam = subnet.ipam();
    let config = &ipam.config.as_ref().unwrap()[0];
    // Docker hands out .88-.94 only, so no job ever holds the proxy's .82.
    assert_eq!(config.ip_range.as_deref(), Some("198.18.0.88/29"));
    assert_eq!(config.gateway.as_deref(), Some("198.18.0.81"));
    let inspected = NetworkInspect {
        ipam: Some(ipam),
        ..Default::default()
    };
    assert_eq!(JobSubnet::of(&inspected), Some(subnet));
    let foreign = NetworkInspect {
        ipam: Some(Ipam {
            config: Some(vec![IpamConfig {
                subnet: Some("172.21.0.0/16".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        JobSubnet::of(&foreign),
        None,
        "a network made before: by name"
    );
}

#[test]
fn two_jobs_start_from_different_subnets() {
    let dir = tempfile::tempdir().unwrap();
    let home = PaddockHome::open_at(dir.path()).unwrap();
    let first = |id: &str| {
        JobSubnet::candidates(&home, &JobId::parse(id).unwrap())
            .next()
            .unwrap()
    };
    assert_ne!(first("a-1"), first("a-2"));
    assert_eq!(
        JobSubnet::candidates(&home, &JobId::parse("a-1").unwrap()).count(),
        SUBNET_TRIES as usize
    );
}
