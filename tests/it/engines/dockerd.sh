#!/bin/sh
# A second Docker daemon for the remote-engine tests: its own network namespace (a veth
# pair: host 10.231.N.1, engine 10.231.N.2), data root, exec root, pidfile, cgroup parent and
# config file, reachable only by TCP with TLS (certificates made here by openssl). Its default
# bridge (10.232.N.1/24, no iptables rules, no masquerade) is where allowlist jobs' egress
# sidecars sit, as on any engine; it reaches the engine's own addresses and nothing beyond.
# A daemon started with other flags (an older version of this script) is restarted. It runs
# in a session of its own, so a test run killed with its process group leaves it running.
# Usage: dockerd.sh start|stop|status NAME N DIR
set -eu
cmd=$1 name=$2 n=$3 dir=$4
ns="pdk-$name"
host_if="pdkh$n" eng_if="pdke$n"
addr="10.231.$n.2"
pidfile="$dir/dockerd.pid"
flags="bridge-10.232;runsc-in-daemon.json"

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

stop() {
    if running; then
        pid=$(cat "$pidfile")
        kill "$pid"
        i=0
        while kill -0 "$pid" 2>/dev/null; do
            i=$((i + 1))
            [ $i -gt 150 ] && { kill -9 "$pid"; break; }
            sleep 0.2
        done
    fi
}

certs() {
    c="$dir/certs"
    [ -f "$c/cert.pem" ] && return 0
    mkdir -p "$c"
    (
        cd "$c"
        openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=paddock test CA $name" \
            -keyout ca-key.pem -out ca.pem 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -subj "/CN=$addr" -keyout server-key.pem \
            -out server.csr 2>/dev/null
        printf 'subjectAltName=IP:%s\nextendedKeyUsage=serverAuth\n' "$addr" >server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
            -days 2 -extfile server.ext -out server-cert.pem 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -subj "/CN=paddock client" -keyout key.pem \
            -out client.csr 2>/dev/null
        printf 'extendedKeyUsage=clientAuth\n' >client.ext
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
            -days 2 -extfile client.ext -out cert.pem 2>/dev/null
        chmod 0600 ./*key.pem
    )
}

network() {
    [ -e "/var/run/netns/$ns" ] || ip netns add "$ns"
    if ! ip link show "$host_if" >/dev/null 2>&1; then
        ip link add "$host_if" type veth peer name "$eng_if"
        ip link set "$eng_if" netns "$ns"
        ip addr add "10.231.$n.1/30" dev "$host_if"
        ip link set "$host_if" up
        ip -n "$ns" addr add "$addr/30" dev "$eng_if"
        ip -n "$ns" link set "$eng_if" up
        ip -n "$ns" link set lo up
    fi
}

case "$cmd" in
start)
    # overlay2, Docker's default, where the kernel's overlayfs mounts in the data root's
    # filesystem; fuse-overlayfs (every container file access a FUSE round trip) elsewhere.
    mkdir -p "$dir"
    storage=fuse-overlayfs
    probe="$dir/overlay-probe"
    mkdir -p "$probe/l" "$probe/u" "$probe/w" "$probe/m"
    if mount -t overlay overlay -o "lowerdir=$probe/l,upperdir=$probe/u,workdir=$probe/w" \
        "$probe/m" 2>/dev/null; then
        umount "$probe/m"
        storage=overlay2
    fi
    rm -rf "$probe"
    flags="$flags;$storage"
    if running && [ "$(cat "$dir/flags" 2>/dev/null)" != "$flags" ]; then stop; fi

    mkdir -p "$dir/data" "$dir/exec"
    certs
    network
    # gVisor as on the local engine (docs/gvisor.md): its own netstack cannot start in this
    # nested setup, so it uses the network namespace Docker made for the container.
    echo '{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=host"]}}}' \
        >"$dir/daemon.json"
    # A running engine reads its configuration again on SIGHUP (runtimes included).
    running && { kill -HUP "$(cat "$pidfile")"; echo "tcp://$addr:2376"; exit 0; }
    setsid nohup nsenter --net="/var/run/netns/$ns" dockerd \
        --config-file "$dir/daemon.json" --data-root "$dir/data" --exec-root "$dir/exec" \
        --pidfile "$pidfile" --cgroup-parent "paddock-$name" --bip "10.232.$n.1/24" --iptables=false \
        --ip-masq=false --storage-driver "$storage" \
        -H "tcp://$addr:2376" --tlsverify --tlscacert "$dir/certs/ca.pem" \
        --tlscert "$dir/certs/server-cert.pem" --tlskey "$dir/certs/server-key.pem" \
        >"$dir/dockerd.log" 2>&1 &
    echo "$flags" >"$dir/flags"
    i=0
    until DOCKER_HOST="tcp://$addr:2376" DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH="$dir/certs" \
        docker version >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -gt 150 ] && { tail -20 "$dir/dockerd.log" >&2; exit 1; }
        sleep 0.2
    done
    echo "tcp://$addr:2376"
    ;;
stop)
    stop
    ;;
status)
    running && echo running || echo stopped
    ;;
esac
