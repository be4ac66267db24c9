//! Binding every `MESHDNS_LISTEN` address over UDP and TCP on the same port, with socket2
//! options set before bind: a large receive buffer (bursts of queries are not dropped by the
//! kernel), and each address first bound without SO_REUSEPORT — with it a second meshdns (or
//! any other DNS server) could bind the same address and silently take half the queries;
//! without it the second one fails with "address in use" and exit 71. A restarted sidecar
//! binds after the old process has exited, so it does not need it either.
//!
//! With more than one runtime thread (`MESHDNS_THREADS`), the exclusive UDP socket is then
//! replaced by one SO_REUSEPORT socket per thread on the same port: the kernel spreads the
//! clients over them and each thread serves its own, as unbound and CoreDNS do. A second
//! meshdns still cannot join: its first, exclusive bind is refused by the group.
//!
//! It owns the sockets' options and the bind errors (with the variable that named the
//! address); it serves nothing, and `main.rs` decides the exit code. The webhook's HTTPS
//! listener is bound by `main.rs` itself, not here.

use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

use crate::config::variables::{ADMIN_LISTEN, DOT_LISTEN, LISTEN, WEBHOOK_LISTEN};

/// Receive buffer asked of the kernel for UDP sockets (it may grant less).
const UDP_RECV_BUFFER: usize = 4 << 20;

/// TCP accept backlog.
const TCP_BACKLOG: i32 = 1024;

/// Attempts at finding a port free for both UDP and TCP when port 0 is asked for.
const PORT_ZERO_TRIES: usize = 16;

/// Accept backlog of the admin listener (a scraper and the kubelet's probes).
const ADMIN_BACKLOG: i32 = 64;

/// The bound sockets, as std sockets in non-blocking mode; `run` hands them to tokio.
#[derive(Debug, Default)]
pub struct Listeners {
    pub udp: Vec<std::net::UdpSocket>,
    pub tcp: Vec<std::net::TcpListener>,
    /// The admin HTTP listener (`MESHDNS_ADMIN_LISTEN`), when enabled; see [`bind_admin`].
    pub admin: Option<std::net::TcpListener>,
    /// The DNS-over-TLS listeners (`MESHDNS_DOT_LISTEN`); see [`bind_dot`].
    pub dot: Vec<std::net::TcpListener>,
}

impl Listeners {
    /// The addresses actually bound (with the ports chosen for port 0), for logs and tests.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        let mut addrs: Vec<SocketAddr> = Vec::new();
        for addr in self.udp.iter().filter_map(|s| s.local_addr().ok()) {
            if !addrs.contains(&addr) {
                addrs.push(addr);
            }
        }
        addrs
    }
}

/// A bind failure, naming the address and the variable it comes from.
#[derive(Debug, thiserror::Error)]
#[error("{variable}: cannot bind {addr}: {source}")]
pub struct BindError {
    /// `MESHDNS_LISTEN`, `MESHDNS_DOT_LISTEN`, `MESHDNS_ADMIN_LISTEN` or `MESHDNS_WEBHOOK_LISTEN`.
    pub(crate) variable: &'static str,
    pub(crate) addr: SocketAddr,
    pub(crate) source: std::io::Error,
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
    bind_spread(addrs, 1)
}

/// [`bind`] with `udp_per_address` UDP sockets on each address (one per runtime thread),
/// sharing its port through SO_REUSEPORT once the exclusive bind has shown the port free.
pub fn bind_spread(addrs: &[SocketAddr], udp_per_address: usize) -> Result<Listeners, BindError> {
    let mut listeners = Listeners::default();
    for &addr in addrs {
        let failed = |source| BindError {
            variable: LISTEN,
            addr,
            source,
        };
        let (udp, tcp) = bind_pair(addr).map_err(failed)?;
        if udp_per_address <= 1 {
            listeners.udp.push(udp);
        } else {
            let bound = udp.local_addr().map_err(failed)?;
            drop(udp);
            for _ in 0..udp_per_address {
                listeners
                    .udp
                    .push(bind_udp(bound, SharePort::Yes).map_err(failed)?);
            }
        }
        listeners.tcp.push(tcp);
    }
    Ok(listeners)
}

/// Binds the DNS-over-TLS listeners, exclusively like every other (a second meshdns fails
/// with "address in use").
pub fn bind_dot(addrs: &[SocketAddr]) -> Result<Vec<std::net::TcpListener>, BindError> {
    addrs
        .iter()
        .map(|&addr| {
            bind_tcp(addr).map_err(|source| BindError {
                variable: DOT_LISTEN,
                addr,
                source,
            })
        })
        .collect()
}

/// Binds the admin HTTP listener. No SO_REUSEPORT here: two processes sharing the port would
/// split scrapes and probes between them.
pub fn bind_admin(addr: SocketAddr) -> Result<std::net::TcpListener, BindError> {
    bind_http(addr, ADMIN_LISTEN)
}

/// Binds the injection webhook's HTTPS listener (`meshdns webhook`), as the admin listener.
pub fn bind_webhook(addr: SocketAddr) -> Result<std::net::TcpListener, BindError> {
    bind_http(addr, WEBHOOK_LISTEN)
}

/// An HTTP listener on `addr`, exclusively, its failure naming `variable`.
fn bind_http(addr: SocketAddr, variable: &'static str) -> Result<std::net::TcpListener, BindError> {
    let bind = || -> std::io::Result<std::net::TcpListener> {
        let socket = new_socket(addr, Type::STREAM, Protocol::TCP)?;
        socket.bind(&addr.into())?;
        socket.listen(ADMIN_BACKLOG)?;
        Ok(socket.into())
    };
    bind().map_err(|source| BindError {
        variable,
        addr,
        source,
    })
}

fn bind_pair(addr: SocketAddr) -> std::io::Result<(std::net::UdpSocket, std::net::TcpListener)> {
    let tries = if addr.port() == 0 { PORT_ZERO_TRIES } else { 1 };
    let mut last = None;
    for _ in 0..tries {
        let udp = bind_udp(addr, SharePort::No)?;
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

/// Whether a UDP socket joins the SO_REUSEPORT group of its port.
#[derive(Clone, Copy, PartialEq)]
enum SharePort {
    No,
    Yes,
}

fn bind_udp(addr: SocketAddr, share: SharePort) -> std::io::Result<std::net::UdpSocket> {
    let socket = new_socket(addr, Type::DGRAM, Protocol::UDP)?;
    if share == SharePort::Yes {
        socket.set_reuse_port(true)?;
    }
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
    fn one_udp_socket_per_thread_shares_the_port_and_still_keeps_others_out() {
        let spread = bind_spread(&["127.0.0.1:0".parse().unwrap()], 2).unwrap();
        assert_eq!(spread.udp.len(), 2);
        assert_eq!(spread.tcp.len(), 1);
        let taken = spread.local_addrs();
        assert_eq!(taken.len(), 1, "one address, listed once");
        assert_eq!(spread.udp[1].local_addr().unwrap(), taken[0]);
        for threads in [1, 2] {
            let error = bind_spread(&taken, threads).unwrap_err();
            assert_eq!(error.source.kind(), std::io::ErrorKind::AddrInUse);
        }
        // Every socket of the group receives: the kernel spreads clients by their address.
        let clients: Vec<std::net::UdpSocket> = (0..32)
            .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        for client in &clients {
            client.send_to(b"query", taken[0]).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut buf = [0u8; 16];
        let received: Vec<usize> = (spread.udp.iter())
            .map(|socket| std::iter::from_fn(|| socket.recv_from(&mut buf).ok()).count())
            .collect();
        assert_eq!(received.iter().sum::<usize>(), clients.len());
        assert!(received.iter().all(|&n| n > 0), "{received:?}");
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
