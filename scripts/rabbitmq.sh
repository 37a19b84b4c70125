#!/usr/bin/env bash
# rabbitmq.sh — run a single RabbitMQ node (Debian's rabbitmq-server package) on 127.0.0.1
# for Sluice's tests, with its own node name, ports, Erlang port mapper, cookie and data
# directory: it never touches the system's RabbitMQ service or its files.
#
#   scripts/rabbitmq.sh start    start the node on free ports bound to 127.0.0.1 (its data
#                                under the cache), wait until it answers AMQP, print
#                                SLUICE_RABBITMQ_URL=amqp://guest:guest@127.0.0.1:PORT/ on
#                                stdout. A node already running is reused (same line).
#   scripts/rabbitmq.sh stop     stop the node and its port mapper; remove its data.
#   scripts/rabbitmq.sh status   print SLUICE_RABBITMQ_URL=... and exit 0 if it runs, else exit 1.
#
# Use it as:  eval "$(scripts/rabbitmq.sh start)"; export SLUICE_RABBITMQ_URL
#
# Needs: apt-get install -y rabbitmq-server (3.10 in Debian 12). The package's service is
# not used; only its programs under /usr/lib/rabbitmq.
#
# Environment:
#   SLUICE_CACHE             cache directory (default: .cache/ at the repo root, git-ignored)
#   SLUICE_RABBITMQ_HOME     RabbitMQ's install (default /usr/lib/rabbitmq)
#   SLUICE_RABBITMQ_TIMEOUT  seconds to wait for the node to answer (default 60)
#
# Progress goes to stderr; only the SLUICE_RABBITMQ_URL line goes to stdout. The node's
# own output goes to $SLUICE_CACHE/rabbitmq/rabbitmq.log.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${SLUICE_CACHE:-$root/.cache}"
rmqhome="${SLUICE_RABBITMQ_HOME:-/usr/lib/rabbitmq}"
timeout="${SLUICE_RABBITMQ_TIMEOUT:-60}"

home="$cache/rabbitmq"
data="$home/data"
logfile="$home/rabbitmq.log"
pidfile="$home/rabbitmq.pid"
epmdpidfile="$home/epmd.pid"
portfile="$home/rabbitmq.port"

name=rabbitmq.sh
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"

# node_env PORT DIST EPMD: export what makes the node (and its CLI tools) private: its
# name, ports, port mapper, cookie ($HOME), and files, none of them the system's.
node_env() {
	export HOME="$data"
	export ERL_EPMD_PORT="$3" ERL_EPMD_ADDRESS=127.0.0.1
	export RABBITMQ_NODENAME=sluice-test@localhost
	export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$1" RABBITMQ_DIST_PORT="$2"
	export RABBITMQ_MNESIA_BASE="$data/mnesia" RABBITMQ_LOG_BASE="$data/log" RABBITMQ_LOGS=-
	export RABBITMQ_CONFIG_FILE="$data/rabbitmq.conf" RABBITMQ_ADVANCED_CONFIG_FILE="$data/advanced.config"
	export RABBITMQ_CONF_ENV_FILE="$data/rabbitmq-env.conf" RABBITMQ_ENABLED_PLUGINS_FILE="$data/enabled_plugins"
	export RABBITMQ_PID_FILE="$data/node.pid" RABBITMQ_ENABLED_PLUGINS=
	# Erlang distribution (for the CLI tools) on 127.0.0.1 only, like the AMQP listener.
	export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
}

# answers PORT: true when something on 127.0.0.1:PORT answers the AMQP 0-9-1 protocol
# header with a frame (connection.start).
answers() {
	local reply
	reply="$( (exec 3<>"/dev/tcp/127.0.0.1/$1" && printf 'AMQP\x00\x00\x09\x01' >&3 && timeout 2 head -c 1 <&3 | od -An -tx1) 2>/dev/null)" || return 1
	[[ "$reply" == *01* ]]
}

print_url() { echo "SLUICE_RABBITMQ_URL=amqp://guest:guest@127.0.0.1:$(cat "$portfile")/"; }

start() {
	mkdir -p "$home"
	if running && [[ -f "$portfile" ]]; then
		say "already running (pid $(cat "$pidfile"))"
		print_url
		return 0
	fi
	[[ -x "$rmqhome/bin/rabbitmq-server" ]] || die "$rmqhome/bin/rabbitmq-server not found (apt-get install -y rabbitmq-server)"
	command -v epmd >/dev/null || die "epmd not found (it comes with rabbitmq-server's erlang-base)"
	stop_all
	rm -rf "$data"
	mkdir -p "$data"
	local port dist epmdport
	port="$(free_port)" || die "no free port found"
	dist="$(free_port)" || die "no free port found"
	epmdport="$(free_port)" || die "no free port found"
	node_env "$port" "$dist" "$epmdport"
	# Quorum queues on one node; a disk alarm only when under 50 MB free (RabbitMQ's
	# default), no plugins.
	printf 'listeners.tcp.default = 127.0.0.1:%s\nloopback_users.guest = true\n' "$port" >"$RABBITMQ_CONFIG_FILE"
	echo '[].' >"$RABBITMQ_ENABLED_PLUGINS_FILE"
	: >"$RABBITMQ_CONF_ENV_FILE"
	: >"$logfile"
	say "starting RabbitMQ on 127.0.0.1:$port (node $RABBITMQ_NODENAME, dist $dist, epmd $epmdport; log: $logfile)"
	# setsid: both outlive this script.
	setsid epmd -port "$epmdport" -address 127.0.0.1 >>"$logfile" 2>&1 </dev/null &
	echo $! >"$epmdpidfile"
	setsid "$rmqhome/bin/rabbitmq-server" >>"$logfile" 2>&1 </dev/null &
	echo $! >"$pidfile"
	echo "$port" >"$portfile"
	local deadline=$((SECONDS + timeout))
	until answers "$port"; do
		running || die "RabbitMQ exited during startup"
		((SECONDS < deadline)) || die "RabbitMQ did not answer within ${timeout}s"
		sleep 0.5
	done
	say "ready"
	print_url
}

# stop_all: stop the node (SIGTERM: RabbitMQ shuts down cleanly; SIGKILL after 30 s) and
# the port mapper this script started.
stop_all() {
	local f pid
	for f in "$pidfile" "$epmdpidfile"; do
		[[ -f "$f" ]] || continue
		pid="$(cat "$f")"
		if alive "$pid"; then
			kill "$pid" 2>/dev/null || true
			for _ in $(seq 1 300); do
				alive "$pid" || break
				sleep 0.1
			done
			kill -9 "$pid" 2>/dev/null || true
		fi
		rm -f "$f"
	done
}

stop() {
	stop_all
	rm -f "$portfile"
	rm -rf "$data"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status)
	if running && [[ -f "$portfile" ]]; then print_url; else exit 1; fi
	;;
*)
	echo "usage: $0 start|stop|status" >&2
	exit 2
	;;
esac
