cases_clients() { :; }
write_results() { printf "%s\n" "${RESULTS[@]}"; }
