/*
 * nng_perf: the roles of `gsp bench` written against C nng (libnng), one per run.
 *
 * Built by gsp_bench.native on first use (cc nng_perf.c -lnng -lpthread) and started by
 * gsp/bench/libs/lib_native.py, which relays the same control channel every worker speaks:
 * JSON lines on stdout ({"ready": {...}}, {"started": true}, {"result": {...}}, {"error": "..."}),
 * words on stdin ("go", "measure", "stop"; "stop" or end of input ends any wait).
 *
 *   nng_perf thr_recv    URL SIZE COUNT          PULL: listen, time first..last message
 *   nng_perf thr_send    URL SIZE COUNT          PUSH: dial, one message, "go", the rest
 *   nng_perf lat_server  URL SIZE COUNT [WARMUP] REP: listen, echo COUNT requests; the CPU
 *                                                time of all but the first WARMUP
 *   nng_perf lat_client  URL SIZE COUNT WARMUP   REQ: dial, WARMUP untimed then COUNT timed
 *   nng_perf rep_server  URL                     REP: listen, echo until "stop"; on "measure"
 *                                                the CPU time since it was ready
 *   nng_perf req_clients URL SIZE CLIENTS COUNT  CLIENTS threads, a REQ socket each
 *
 * The semantics are those of the Python roles (gsp/bench/libs/base.py and loops.py): the
 * receiver times from its first message to its last; round trips are timed one by one after
 * the warm-ups; the concurrent clients share COUNT requests evenly and are timed together.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#ifdef __linux__
#include <signal.h>
#include <sys/prctl.h>
#endif

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_seconds(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)r.ru_utime.tv_sec + (double)r.ru_utime.tv_usec * 1e-6 +
           (double)r.ru_stime.tv_sec + (double)r.ru_stime.tv_usec * 1e-6;
}

static long page_faults(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_minflt;
}

static void fail(const char *what, int rv) {
    printf("{\"error\": \"%s: %s\"}\n", what, nng_strerror(rv));
    fflush(stdout);
    exit(1);
}

/* Until WORD (or "stop", or the end of stdin) arrives. */
static void wait_word(const char *word) {
    char line[64];
    while (fgets(line, sizeof line, stdin) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        if (strcmp(line, word) == 0 || strcmp(line, "stop") == 0) {
            return;
        }
    }
}

static char *payload(size_t size) {
    char *p = malloc(size ? size : 1);
    if (p == NULL) {
        fail("malloc", NNG_ENOMEM);
    }
    memset(p, 'x', size);
    if (size) {
        p[0] = 'D';
    }
    return p;
}

typedef int (*opener)(nng_socket *);

static nng_socket open_socket(opener open) {
    nng_socket s;
    int rv;
    if ((rv = open(&s)) != 0) {
        fail("open", rv);
    }
    if ((rv = nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 0)) != 0) { /* no limit: 1 MiB runs */
        fail("recv max size", rv);
    }
    return s;
}

/* Listen on URL (port 0: any) and report {"ready": {"url": the bound address}}. */
/* tls+tcp:// and wss:// take their certificates from $GSP_BENCH_TLS, a directory the bench
 * writes (server.pem: the server's certificate and key; ca.pem: the CA that issued it). */
static int secure(const char *url) {
    return strncmp(url, "tls+tcp://", 10) == 0 || strncmp(url, "wss://", 6) == 0;
}

static nng_tls_config *tls_config(nng_tls_mode mode) {
    const char *dir = getenv("GSP_BENCH_TLS");
    char path[4096];
    nng_tls_config *cfg;
    int rv;
    if (dir == NULL) {
        fail("tls: $GSP_BENCH_TLS is not set", NNG_EINVAL);
    }
    if ((rv = nng_tls_config_alloc(&cfg, mode)) != 0) {
        fail("tls config", rv);
    }
    if (mode == NNG_TLS_MODE_SERVER) {
        snprintf(path, sizeof path, "%s/server.pem", dir);
        rv = nng_tls_config_cert_key_file(cfg, path, NULL);
    } else {
        snprintf(path, sizeof path, "%s/ca.pem", dir);
        if ((rv = nng_tls_config_ca_file(cfg, path)) == 0) {
            rv = nng_tls_config_server_name(cfg, "localhost");
        }
    }
    if (rv != 0) {
        fail(path, rv);
    }
    return cfg;
}

/* A socket of open with an endpoint on url: a listener (l given: it is set to it) or a dialer
   (l NULL), with the bench's TLS config as the server or the client on tls+tcp and wss, started. */
static nng_socket endpoint(opener open, const char *url, nng_listener *l) {
    nng_socket s = open_socket(open);
    nng_dialer d;
    const char *what = l ? "listen" : "dial";
    int rv = l ? nng_listener_create(l, s, url) : nng_dialer_create(&d, s, url);
    if (rv == 0 && secure(url)) {
        nng_tls_config *cfg = tls_config(l ? NNG_TLS_MODE_SERVER : NNG_TLS_MODE_CLIENT);
        what = l ? "listener tls" : "dialer tls";
        rv = l ? nng_listener_set_ptr(*l, NNG_OPT_TLS_CONFIG, cfg)
               : nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg);
        nng_tls_config_free(cfg);
    }
    if (rv == 0) {
        what = l ? "listen" : "dial";
        rv = l ? nng_listener_start(*l, 0) : nng_dialer_start(d, 0);
    }
    if (rv != 0) {
        fail(what, rv);
    }
    return s;
}

static nng_socket listen_ready(opener open, const char *url) {
    nng_listener l;
    nng_socket s = endpoint(open, url, &l);
    nng_sockaddr sa;
    char bound[300];
    snprintf(bound, sizeof bound, "%s", url);
    if (strncmp(url, "tcp://", 6) == 0 && nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa) == 0) {
        if (sa.s_family == NNG_AF_INET) {
            const unsigned char *a = (const unsigned char *)&sa.s_in.sa_addr;
            snprintf(bound, sizeof bound, "tcp://%u.%u.%u.%u:%u", a[0], a[1], a[2], a[3],
                     (unsigned)ntohs(sa.s_in.sa_port));
        } else if (sa.s_family == NNG_AF_INET6) {
            const unsigned char *a = sa.s_in6.sa_addr;
            int n = snprintf(bound, sizeof bound, "tcp://[");
            for (int i = 0; i < 16; i += 2) {
                n += snprintf(bound + n, sizeof bound - n, "%s%x", i ? ":" : "",
                              (unsigned)(a[i] << 8 | a[i + 1]));
            }
            snprintf(bound + n, sizeof bound - n, "]:%u", (unsigned)ntohs(sa.s_in6.sa_port));
        }
    }
    printf("{\"ready\": {\"url\": \"%s\"}}\n", bound);
    fflush(stdout);
    return s;
}

static nng_socket dial(opener open, const char *url) {
    return endpoint(open, url, NULL);
}

static void recv_one(nng_socket s) {
    nng_msg *m;
    int rv;
    if ((rv = nng_recvmsg(s, &m, 0)) != 0) {
        fail("recv", rv);
    }
    nng_msg_free(m);
}

static void send_one(nng_socket s, char *buf, size_t size) {
    int rv;
    if ((rv = nng_send(s, buf, size, 0)) != 0) {
        fail("send", rv);
    }
}

/* Echo one request; 0, or the error (NNG_ECLOSED once the socket is closed). */
static int echo_one(nng_socket s) {
    nng_msg *m;
    int rv;
    if ((rv = nng_recvmsg(s, &m, 0)) != 0) {
        return rv;
    }
    if ((rv = nng_sendmsg(s, m, 0)) != 0) {
        nng_msg_free(m);
    }
    return rv;
}

static void thr_recv(const char *url, size_t size, long count) {
    nng_socket s = listen_ready(nng_pull0_open, url);
    (void)size;
    recv_one(s);
    double t0 = now(), c0 = cpu_seconds();
    long f0 = page_faults();
    printf("{\"started\": true}\n");
    fflush(stdout);
    for (long i = 1; i < count; i++) {
        recv_one(s);
    }
    double elapsed = now() - t0, cpu = cpu_seconds() - c0;
    long faults = page_faults() - f0;
    printf("{\"result\": {\"count\": %ld, \"elapsed\": %.9f, \"cpu\": %.6f, \"faults\": %ld}}\n",
           count, elapsed, cpu, faults);
    fflush(stdout);
    nng_close(s);
}

static void thr_send(const char *url, size_t size, long count) {
    nng_socket s = dial(nng_push0_open, url);
    char *buf = payload(size);
    send_one(s, buf, size);
    wait_word("go");
    double c0 = cpu_seconds();
    for (long i = 1; i < count; i++) {
        send_one(s, buf, size);
    }
    wait_word("measure"); /* the receiver has them all: what it took to send is spent */
    printf("{\"result\": {\"cpu\": %.6f}}\n", cpu_seconds() - c0);
    fflush(stdout);
    wait_word("stop");
    nng_close(s);
    free(buf);
}

static void lat_server(const char *url, size_t size, long count, long warmup) {
    nng_socket s = listen_ready(nng_rep0_open, url);
    int rv;
    double c0 = 0;
    (void)size;
    for (long i = 0; i < count; i++) {
        if (i == warmup) {
            c0 = cpu_seconds();
        }
        if ((rv = echo_one(s)) != 0) {
            fail("echo", rv);
        }
    }
    printf("{\"result\": {\"cpu\": %.6f}}\n", count > warmup ? cpu_seconds() - c0 : 0.0);
    fflush(stdout);
    wait_word("stop");
    nng_close(s);
}

static void lat_client(const char *url, size_t size, long count, long warmup) {
    nng_socket s = dial(nng_req0_open, url);
    char *buf = payload(size);
    double *samples = malloc(sizeof(double) * (size_t)(count > 0 ? count : 1));
    for (long i = 0; i < warmup; i++) {
        send_one(s, buf, size);
        recv_one(s);
    }
    double c0 = cpu_seconds();
    double t0 = now();
    for (long i = 0; i < count; i++) {
        double t = now();
        send_one(s, buf, size);
        recv_one(s);
        samples[i] = now() - t;
    }
    double elapsed = now() - t0, cpu = cpu_seconds() - c0;
    printf("{\"result\": {\"count\": %ld, \"elapsed\": %.9f, \"cpu\": %.6f, \"samples\": [",
           count, elapsed, cpu);
    for (long i = 0; i < count; i++) {
        printf("%s%.9f", i ? ", " : "", samples[i]);
    }
    printf("]}}\n");
    fflush(stdout);
    free(samples);
    free(buf);
    nng_close(s);
}

static void *echo_forever(void *arg) {
    nng_socket s = *(nng_socket *)arg;
    while (echo_one(s) != NNG_ECLOSED) {
    }
    return NULL;
}

static void rep_server(const char *url) {
    nng_socket s = listen_ready(nng_rep0_open, url);
    pthread_t t;
    double c0 = cpu_seconds();
    pthread_create(&t, NULL, echo_forever, &s);
    wait_word("measure");
    printf("{\"result\": {\"cpu\": %.6f}}\n", cpu_seconds() - c0);
    fflush(stdout);
    wait_word("stop");
    nng_close(s); /* the echo thread's recv returns NNG_ECLOSED */
    pthread_join(t, NULL);
}

struct client {
    pthread_t thread;
    nng_socket sock;
    char *buf;
    size_t size;
    long count;
};

static void *client_run(void *arg) {
    struct client *c = arg;
    for (long i = 0; i < c->count; i++) {
        send_one(c->sock, c->buf, c->size);
        recv_one(c->sock);
    }
    return NULL;
}

static void req_clients(const char *url, size_t size, long clients, long count) {
    struct client *cs = calloc((size_t)clients, sizeof *cs);
    char *buf = payload(size);
    long per = count / clients > 0 ? count / clients : 1;
    for (long i = 0; i < clients; i++) {
        cs[i].sock = dial(nng_req0_open, url);
        cs[i].buf = buf;
        cs[i].size = size;
        cs[i].count = per;
    }
    double c0 = cpu_seconds();
    double t0 = now();
    for (long i = 0; i < clients; i++) {
        pthread_create(&cs[i].thread, NULL, client_run, &cs[i]);
    }
    for (long i = 0; i < clients; i++) {
        pthread_join(cs[i].thread, NULL);
    }
    double elapsed = now() - t0, cpu = cpu_seconds() - c0;
    printf("{\"result\": {\"requests\": %ld, \"elapsed\": %.9f, \"cpu\": %.6f}}\n",
           per * clients, elapsed, cpu);
    fflush(stdout);
    for (long i = 0; i < clients; i++) {
        nng_close(cs[i].sock);
    }
    free(cs);
    free(buf);
}

int main(int argc, char **argv) {
    const char *role = argc > 1 ? argv[1] : "";
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive the bench's worker (killed at a timeout) */
#endif
    if (strcmp(role, "version") == 0) {
        printf("%s\n", nng_version());
        return 0;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: nng_perf ROLE URL [SIZE COUNT ...] (see the source)\n");
        return 2;
    }
    const char *url = argv[2];
    size_t size = argc > 3 ? (size_t)strtoull(argv[3], NULL, 10) : 0;
    long a = argc > 4 ? strtol(argv[4], NULL, 10) : 0;
    long b = argc > 5 ? strtol(argv[5], NULL, 10) : 0;
    if (strcmp(role, "thr_recv") == 0) {
        thr_recv(url, size, a);
    } else if (strcmp(role, "thr_send") == 0) {
        thr_send(url, size, a);
    } else if (strcmp(role, "lat_server") == 0) {
        lat_server(url, size, a, b);
    } else if (strcmp(role, "lat_client") == 0) {
        lat_client(url, size, a, b);
    } else if (strcmp(role, "rep_server") == 0) {
        rep_server(url);
    } else if (strcmp(role, "req_clients") == 0) {
        req_clients(url, size, a, b);
    } else {
        fprintf(stderr, "nng_perf: unknown role %s\n", role);
        return 2;
    }
    return 0;
}
