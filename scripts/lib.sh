# lib.sh — what the scripts that run test dependencies (kafka.sh, kinesis.sh) share.
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

# port_free PORT: true when nothing accepts connections on 127.0.0.1:PORT.
port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# free_port: print a port in 20000-32767 that nothing listens on: below Linux's ephemeral
# range (32768-60999), where a client connecting to a port before its server binds it (as
# Kafka's raft client does to its own controller port) can be given that very port as its
# local one, connect to itself and hold it: the server then fails with "Address already in use".
free_port() {
	local p i
	for i in $(seq 1 50); do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 12768))
		if port_free "$p"; then
			echo "$p"
			return 0
		fi
	done
	return 1
}
