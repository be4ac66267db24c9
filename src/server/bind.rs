//! Binding every `MESHDNS_LISTEN` address over UDP and TCP on the same port, with socket2
//! options set before bind: a large receive buffer (bursts of queries are not dropped by the
//! kernel), and no SO_REUSEPORT — with it a second meshdns (or any other DNS server) could
//! bind the same address and silently take half the queries; without it the second one fails
//! with "address in use" and exit 71. A restarted sidecar binds after the old process has
//! exited, so it does not need it either.

use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

use crate::config::variables::{ADMIN_LISTEN, LISTEN};

/// Receive buffer asked of the kernel for UDP sockets (it may grant less).
const UDP_RECV_BUFFER: usize = 4 << 20;

/// TCP accept backlog.
const TCP_BACKLOG: i32 = 1024;

/// Attempts at finding a port free for both UDP and TCP when port 0 is asked for.
const PORT_ZERO_TRIES: usize = 16;

/// Accept backlog of the admin listener (a scraper and the kubelet's probes).
const ADMIN_BACKLOG: i32 = 64;

/// The bound sockets, as std sockets in non-blocking mode; `run` hands them to tokio.
#[derive(Debug)]
pub struct Listeners {
    pub udp: Vec<std::net::UdpSocket>,
    pub tcp: Vec<std::net::TcpListener>,
    /// The admin HTTP listener (`MESHDNS_ADMIN_LISTEN`), when enabled; see [`bind_admin`].
    pub admin: Option<std::net::TcpListener>,
}

impl Listeners {
    /// The addresses actually bound (with the ports chosen for port 0), for logs and tests.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.udp
            .iter()
            .filter_map(|s| s.local_addr().ok())
            .collect()
    }
}

/// A bind failure, naming the address and the variable it comes from.
#[derive(Debug, thiserror::Error)]
#[error("{variable}: cannot bind {addr}: {source}")]
pub struct BindError {
    /// `MESHDNS_LISTEN` or `MESHDNS_ADMIN_LISTEN`.
    pub variable: &'static str,
    pub addr: SocketAddr,
    pub source: std::io::Error,
}

impl BindError {
    /// What the operator can do about it, by cause.
    pub fn hint(&self) -> String {
        let variable = self.variable;
        match self.source.kind() {
            std::io::ErrorKind::PermissionDenied => "ports below 1024 need root, \
                 CAP_NET_BIND_SERVICE, or the pod sysctl net.ipv4.ip_unprivileged_port_start=53"
                .to_string(),
            std::io::ErrorKind::AddrInUse => format!(
                "another process holds it (perhaps another meshdns); stop it, or set {variable} \
                 to another address"
            ),
            std::io::ErrorKind::AddrNotAvailable => {
                format!("no interface has this address; check {variable}")
            }
            _ => format!("check {variable}"),
        }
    }
}

/// Binds UDP and TCP on each address. Port 0 picks one port free for both protocols.
pub fn bind(addrs: &[SocketAddr]) -> Result<Listeners, BindError> {
    let mut listeners = Listeners {
        udp: Vec::new(),
        tcp: Vec::new(),
        admin: None,
    };
    for &addr in addrs {
        let (udp, tcp) = bind_pair(addr).map_err(|source| BindError {
            variable: LISTEN,
            addr,
            source,
        })?;
        listeners.udp.push(udp);
        listeners.tcp.push(tcp);
    }
    Ok(listeners)
}

/// Binds the admin HTTP listener. No SO_REUSEPORT here: two processes sharing the port would
/// split scrapes and probes between them.
pub fn bind_admin(addr: SocketAddr) -> Result<std::net::TcpListener, BindError> {
    let bind = || -> std::io::Result<std::net::TcpListener> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        if addr.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        socket.set_reuse_address(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        socket.listen(ADMIN_BACKLOG)?;
        Ok(socket.into())
    };
    bind().map_err(|source| BindError {
        variable: ADMIN_LISTEN,
        addr,
        source,
    })
}

fn bind_pair(addr: SocketAddr) -> std::io::Result<(std::net::UdpSocket, std::net::TcpListener)> {
    let tries = if addr.port() == 0 { PORT_ZERO_TRIES } else { 1 };
    let mut last = None;
    for _ in 0..tries {
        let udp = bind_udp(addr)?;
        let bound = udp.local_addr()?;
        match bind_tcp(bound) {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no port free for both UDP and TCP")))
}

fn new_socket(addr: SocketAddr, ty: Type, protocol: Protocol) -> std::io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), ty, Some(protocol))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    // SO_REUSEADDR only: TCP may bind while old connections sit in TIME_WAIT.
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

fn bind_udp(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let socket = new_socket(addr, Type::DGRAM, Protocol::UDP)?;
    // Best effort: an unprivileged process may be capped by net.core.rmem_max.
    let _ = socket.set_recv_buffer_size(UDP_RECV_BUFFER);
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

fn bind_tcp(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = new_socket(addr, Type::STREAM, Protocol::TCP)?;
    socket.set_tcp_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(TCP_BACKLOG)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_listener_on_the_same_address_fails_with_address_in_use() {
        let first = bind(&["127.0.0.1:0".parse().unwrap()]).unwrap();
        let taken = first.local_addrs()[0];
        let error = bind(&[taken]).unwrap_err();
        assert_eq!(error.source.kind(), std::io::ErrorKind::AddrInUse);
        assert!(error.to_string().starts_with("MESHDNS_LISTEN"), "{error}");
        assert!(error.hint().contains("MESHDNS_LISTEN"));
        assert!(!error.hint().contains("MESHDNS_ADMIN_LISTEN"));
    }

    #[test]
    fn port_zero_never_shares_a_port() {
        let bound: Vec<Listeners> = (0..200)
            .map(|_| bind(&["127.0.0.1:0".parse().unwrap()]).unwrap())
            .collect();
        let mut ports: Vec<u16> = bound
            .iter()
            .flat_map(|l| l.local_addrs())
            .map(|a| a.port())
            .collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), bound.len());
    }
}
