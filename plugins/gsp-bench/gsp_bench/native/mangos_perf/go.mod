module gsp.invalid/bench/mangos_perf

go 1.19

require go.nanomsg.org/mangos/v3 v3.4.2
