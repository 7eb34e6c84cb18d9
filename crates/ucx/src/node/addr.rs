//! Socket addresses as UCX takes and gives them.

use std::net::SocketAddr;

use crate::sys;

/// A `sockaddr` for `addr`, kept alive while UCX reads it.
pub(super) enum SockAddr {
    V4(libc::sockaddr_in),
    V6(libc::sockaddr_in6),
}

impl SockAddr {
    pub(super) fn new(addr: SocketAddr) -> SockAddr {
        match addr {
            SocketAddr::V4(a) => SockAddr::V4(libc::sockaddr_in {
                sin_family: libc::AF_INET as _,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            }),
            SocketAddr::V6(a) => SockAddr::V6(libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as _,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            }),
        }
    }

    pub(super) fn ucs(&self) -> sys::ucs_sock_addr_t {
        let (addr, addrlen) = match self {
            SockAddr::V4(a) => (
                a as *const libc::sockaddr_in as *const sys::sockaddr,
                std::mem::size_of::<libc::sockaddr_in>(),
            ),
            SockAddr::V6(a) => (
                a as *const libc::sockaddr_in6 as *const sys::sockaddr,
                std::mem::size_of::<libc::sockaddr_in6>(),
            ),
        };
        sys::ucs_sock_addr_t {
            addr,
            addrlen: addrlen as _,
        }
    }
}

/// Reads the address in a `sockaddr_storage` UCX filled.
pub(super) fn from_storage(s: &sys::sockaddr_storage) -> Option<SocketAddr> {
    let p = s as *const sys::sockaddr_storage;
    // SAFETY: a `sockaddr_storage` is large and aligned enough for either family, and UCX
    // filled it with the family its `ss_family` names.
    unsafe {
        match (*p).ss_family as i32 {
            libc::AF_INET => {
                let a = &*(p as *const libc::sockaddr_in);
                let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
                Some(SocketAddr::from((ip, u16::from_be(a.sin_port))))
            }
            libc::AF_INET6 => {
                let a = &*(p as *const libc::sockaddr_in6);
                let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
                Some(SocketAddr::from((ip, u16::from_be(a.sin6_port))))
            }
            _ => None,
        }
    }
}
