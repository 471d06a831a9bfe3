# Sourced by the resume tests: kill_after_save PID FILE waits (up to 10
# minutes) for the run PID to write FILE, or to end, then kills it with
# SIGKILL and fails (fail, the caller's) unless the kill is what ended it.
kill_after_save() {
    for _ in $(seq 1 60000); do
        [ -f "$2" ] && break
        kill -0 "$1" 2>/dev/null || break
        sleep 0.01
    done
    kill -KILL "$1"
    wait "$1"
    status=$?
    [ $status -eq 137 ] || fail "the run ended (status $status) before it could be killed"
}
