# lib.sh — what the scripts that run test dependencies (kafka.sh, awslite.sh for kinesis.sh and dynalite.sh, rabbitmq.sh) share.
# Source it after setting: name (prefix of messages), logfile (tailed when dying) and
# pidfile (the process this script started).

say() { echo "$name: $*" >&2; }

die() {
	say "$*"
	if [[ -f "$logfile" ]]; then
		say "last lines of $logfile:"
		tail -n 40 "$logfile" >&2 || true
	fi
	exit 1
}

# running: true when the pid file names a live process.
running() {
	[[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

# alive PID: true when process PID runs (a zombie not yet reaped counts as dead).
alive() {
	local st
	st="$(ps -o stat= -p "$1" 2>/dev/null)" || return 1
	[[ -n "$st" && "$st" != Z* ]]
}

# port_free PORT: true when nothing accepts connections on 127.0.0.1:PORT.
port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# free_port: print a port that nothing listens on, from 20000 up to the kernel's
# ephemeral range (where outgoing connections take their local ports: a listener started
# later on such a port would fail to bind, and a client connecting to a port before its
# server binds it — as Kafka's raft client does to its own controller port — can be given
# that very port as its local one, connect to itself and hold it).
free_port() {
	local p i lo=32768
	read -r lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
	((lo > 21000)) || lo=60000
	for i in $(seq 1 50); do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % (lo - 20000)))
		if port_free "$p"; then
			echo "$p"
			return 0
		fi
	done
	return 1
}
