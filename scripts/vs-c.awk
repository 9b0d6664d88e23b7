# Summary of scripts/bench.sh --vs-c: reads the client's lines
#   BENCH <driver> <mode> <test> <run> <value> <unit> <client CPU> <server CPU> <CPU unit>
#   BENCH <driver> <mode> <test|all> <run> failed <why>
# and prints, per mode and test, both drivers' medians with their spread and the number of
# runs behind them, the Rust/C ratio as the median of the runs where both measured (with
# its spread), and the CPU both hosts spent per unit moved. Failed measurements are listed
# and counted, never left out silently; the exit status is their number (at most 100).
# Variables: json (output file), dat (chart data), when (date), commit and flavour (what was
# measured: the commit and the kernel flavour).

function sort_list(list, a,   n, i, j, t) {
	n = split(list, a, " ")
	for (i = 1; i <= n; i++)
		for (j = i + 1; j <= n; j++)
			if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n
}
# stats(LIST): sets med, lo, hi and cnt from a space-separated list of figures.
function stats(list,   a) {
	cnt = sort_list(list, a)
	if (cnt == 0) { med = lo = hi = 0; return 0 }
	lo = a[1]; hi = a[cnt]
	med = cnt % 2 ? a[(cnt + 1) / 2] : (a[cnt / 2] + a[cnt / 2 + 1]) / 2
	return cnt
}
function inverse(v) { return v > 0 ? 1 / v : 0 }
# num(V, OK): V for JSON, or null where nothing was measured.
function num(v, ok) { return ok ? sprintf("%.5g", v) : "null" }
function fmt(v) { return v >= 100 ? sprintf("%.0f", v) : v >= 10 ? sprintf("%.1f", v) : sprintf("%.3g", v) }
# paired(KIND, KEY): the Rust/C ratios of figure KIND (1 value, 2 client CPU, 3 server CPU)
# over the runs where both drivers measured KEY.
function paired(kind, key,   r, l) {
	l = ""
	for (r = 1; r <= maxrun; r++)
		if ((key SUBSEP "c" SUBSEP r SUBSEP kind) in fig && (key SUBSEP "rust" SUBSEP r SUBSEP kind) in fig &&
		    fig[key, "c", r, kind] > 0)
			l = l " " fig[key, "rust", r, kind] / fig[key, "c", r, kind]
	return l
}
# paired_with(KEY, DRV, REF): DRV's figures of KEY over the in-kernel reference REF's of the
# same run.
function paired_with(key, drv, ref,   r, l) {
	l = ""
	for (r = 1; r <= maxrun; r++)
		if ((key SUBSEP drv SUBSEP r SUBSEP 1) in fig && (ref SUBSEP "verbs" SUBSEP r SUBSEP 1) in fig &&
		    fig[ref, "verbs", r, 1] > 0)
			l = l " " fig[key, drv, r, 1] / fig[ref, "verbs", r, 1]
	return l
}
function runs_of(key, drv, kind,   r, l) {
	l = ""
	for (r = 1; r <= maxrun; r++)
		if ((key SUBSEP drv SUBSEP r SUBSEP kind) in fig) l = l " " fig[key, drv, r, kind]
	return l
}
# The guests' results come through a serial console: lines may end in CR.
{ sub(/\r$/, "") }
$1 == "BENCH" {
	drv = $2; mode = $3; test = $4; run = $5
	if (run > maxrun) maxrun = run
	if ($6 == "failed") {
		why = $7; for (i = 8; i <= NF; i++) why = why " " $i
		n = split(test == "all" ? "tcp_stream tcp_maerts tcp_rr udp_stream tcp_4_streams" : test, t, " ")
		for (i = 1; i <= n; i++) {
			key = mode SUBSEP t[i]
			nfail[key, drv]++
			if (drv == "verbs") { isref[key] = 1 }
			failures = failures sprintf("  run %d, %s driver, %s %s: %s\n", run, drv, mode, t[i], why)
			nfailures++
			if (!(key in seen)) { seen[key] = 1; order[++nkeys] = key }
		}
		next
	}
	key = mode SUBSEP test
	if (drv == "verbs") isref[key] = 1
	if (!(key in seen)) { seen[key] = 1; order[++nkeys] = key }
	fig[key, drv, run, 1] = $6; unit[key] = $7
	fig[key, drv, run, 2] = $8; fig[key, drv, run, 3] = $9; cpuunit[key] = $10
}
END {
	printf "%-9s %-13s %-8s %-26s %-26s %-22s %-16s %-16s\n", "mode", "test", "unit", "C: median (min..max) n", \
		"Rust: median (min..max) n", "Rust/C (min..max) pairs", "client CPU R/C", "server CPU R/C"
	printf "{\n  \"date\": \"%s\",\n  \"commit\": \"%s\",\n  \"kernel_flavour\": \"%s\",\n  \"runs\": %d,\n  \"failed_measurements\": %d", when, commit, flavour, maxrun, nfailures > json
	for (i = 1; i <= nkeys; i++) {
		key = order[i]; split(key, k, SUBSEP); mode = k[1]; test = k[2]
		if (key in isref) continue
		u = key in unit ? unit[key] : "-"
		line = ""
		for (d = 1; d <= 2; d++) {
			drv = d == 1 ? "c" : "rust"
			stats(runs_of(key, drv, 1))
			m[drv] = med; l[drv] = lo; h[drv] = hi; nr[drv] = cnt
			f[drv] = (key SUBSEP drv) in nfail ? nfail[key, drv] : 0
			stats(runs_of(key, drv, 2)); cc[drv] = med
			stats(runs_of(key, drv, 3)); sc[drv] = med
			line = line sprintf(" %-26s", cnt ? sprintf("%s (%s..%s) %d%s", fmt(m[drv]), fmt(l[drv]), fmt(h[drv]), cnt, f[drv] ? "+" f[drv] "F" : "") : f[drv] ? "failed " f[drv] "F" : "-")
		}
		pairs = stats(paired(1, key)); ratio = med; rlo = lo; rhi = hi
		stats(paired(2, key)); cr = med; crlo = lo; crhi = hi
		stats(paired(3, key)); sr = med; srlo = lo; srhi = hi
		printf "%-9s %-13s %-8s%s %-22s %-16s %-16s\n", mode, test, u, line, \
			pairs ? sprintf("%.3f (%.2f..%.2f) %d", ratio, rlo, rhi, pairs) : "none", \
			pairs ? sprintf("%.3f", cr) : "-", pairs ? sprintf("%.3f", sr) : "-"
		printf ",\n  \"rust_to_c_%s_%s\": {\"unit\": \"%s\", \"ratio\": %s, \"ratio_min\": %s, \"ratio_max\": %s, \"pairs\": %d,", \
			mode, test, u, num(ratio, pairs), num(rlo, pairs), num(rhi, pairs), pairs > json
		for (d = 1; d <= 2; d++) {
			drv = d == 1 ? "c" : "rust"
			ok = nr[drv]
			printf " \"%s\": {\"median\": %s, \"min\": %s, \"max\": %s, \"runs\": %d, \"failed\": %d, \"client_cpu\": %s, \"server_cpu\": %s},", \
				drv, num(m[drv], ok), num(l[drv], ok), num(h[drv], ok), nr[drv], f[drv], num(cc[drv], ok), num(sc[drv], ok) > json
		}
		printf " \"cpu_unit\": \"%s\", \"client_cpu_ratio\": %s, \"server_cpu_ratio\": %s}", \
			(key in cpuunit) ? cpuunit[key] : "-", num(cr, pairs), num(sr, pairs) > json
		# Chart: above 1 means ours is better (latency and CPU inverted).
		if (pairs) {
			if (u == "us") { tv = 1 / ratio; tlo = 1 / rhi; thi = 1 / rlo }
			else { tv = ratio; tlo = rlo; thi = rhi }
			printf "%s_%s %.4f %.4f %.4f %.4f %.4f %.4f %.4f %.4f %.4f\n", mode, test, tv, tlo, thi, \
				inverse(cr), inverse(crhi), inverse(crlo), inverse(sr), inverse(srhi), inverse(srlo) > dat
		}
	}
	# The in-kernel reference: raw verbs streams on the same link in the same run, and each
	# driver's TCP_STREAM of the same mode over it, paired by run.
	printf "\nIn-kernel reference (rdma_rs_selftest stream mode, what arrived at the receiver):\n"
	for (i = 1; i <= nkeys; i++) {
		key = order[i]
		if (!(key in isref)) continue
		split(key, k, SUBSEP); mode = k[1]; test = k[2]
		cnt = stats(runs_of(key, "verbs", 1)); m1 = med; l1 = lo; h1 = hi
		stats(runs_of(key, "verbs", 2)); cc1 = med
		stats(runs_of(key, "verbs", 3)); sc1 = med
		fl = (key SUBSEP "verbs") in nfail ? nfail[key, "verbs"] : 0
		printf "%-9s %-13s Mbit/s   %-26s client %s s/MB, server %s s/MB\n", mode, test, \
			cnt ? sprintf("%s (%s..%s) %d%s", fmt(m1), fmt(l1), fmt(h1), cnt, fl ? "+" fl "F" : "") : "failed", \
			cnt ? fmt(cc1) : "-", cnt ? fmt(sc1) : "-"
		printf ",\n  \"verbs_%s_%s\": {\"unit\": \"Mbit/s\", \"median\": %s, \"min\": %s, \"max\": %s, \"runs\": %d, \"failed\": %d, \"client_cpu\": %s, \"server_cpu\": %s, \"cpu_unit\": \"s/MB\"}", \
			mode, test, num(m1, cnt), num(l1, cnt), num(h1, cnt), cnt, fl, num(cc1, cnt), num(sc1, cnt) > json
		for (d = 1; d <= 2; d++) {
			drv = d == 1 ? "c" : "rust"
			pairs = stats(paired_with(mode SUBSEP "tcp_stream", drv, key))
			printf "  %s %s TCP_STREAM / %s: %s\n", drv == "c" ? "C" : "Rust", mode, test, \
				pairs ? sprintf("%.3f (%.2f..%.2f) %d pairs", med, lo, hi, pairs) : "none"
			printf ",\n  \"%s_%s_tcp_to_verbs_%s_ratio\": {\"ratio\": %s, \"ratio_min\": %s, \"ratio_max\": %s, \"pairs\": %d}", \
				drv, mode, test, num(med, pairs), num(lo, pairs), num(hi, pairs), pairs > json
		}
	}
	printf "\n}\n" > json
	printf "\nRust/C: throughput above 1 and latency (us) and CPU per unit below 1 favour ours. "
	printf "Ratios are medians over the runs where both drivers measured (pairs); n counts runs, F failures.\n"
	if (nfailures) {
		printf "\n%d measurements failed:\n%s", nfailures, failures
		exit (nfailures > 100 ? 100 : nfailures)
	}
}
