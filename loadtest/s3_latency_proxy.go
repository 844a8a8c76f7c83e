// s3_latency_proxy: a reverse proxy in front of an S3 server (MinIO) that adds
// the latency of a real object store, so benchmarks on loopback can show what
// a deployment against S3 Standard would see.
//
// Every request is forwarded unchanged (the Host header too, so SigV4
// signatures made for the proxy's address still verify upstream). Delays:
//
//	PUT/POST   -put-base + size in MiB x -put-per-mib, before forwarding
//	           (the upload's time to first acknowledgement)
//	GET/HEAD   -get-first-byte, after the upstream answered and before the
//	           headers go back (a LIST, a GET with ?list-type, waits -list)
//	DELETE     -delete
//
// each multiplied by a log-normal factor with median 1 and sigma -jitter, so
// the tail looks like a real store's (p99 about e^(2.33 sigma) x the median).
// The defaults are an S3 Standard-like profile from the same region: an
// 8 MiB PUT takes about 80 + 8 x 15 = 200 ms at the median, a GET's first
// byte about 30 ms.
//
// It prints one JSON line when it is ready: {"listening": "127.0.0.1:PORT"}.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

type profile struct {
	putBase, putPerMiB, getFirstByte, list, del time.Duration
	jitter                                       float64
}

type delayer struct {
	p    profile
	mu   sync.Mutex
	rng  *rand.Rand
	next http.RoundTripper
}

func (d *delayer) factor() float64 {
	if d.p.jitter <= 0 {
		return 1
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return math.Exp(d.rng.NormFloat64() * d.p.jitter)
}

func (d *delayer) wait(base time.Duration) {
	if base > 0 {
		time.Sleep(time.Duration(float64(base) * d.factor()))
	}
}

func isList(r *http.Request) bool {
	q := r.URL.Query()
	return q.Has("list-type") || (r.URL.Path == "/" || strings.Count(strings.Trim(r.URL.Path, "/"), "/") == 0) && r.Method == http.MethodGet && !q.Has("uploadId")
}

func (d *delayer) RoundTrip(r *http.Request) (*http.Response, error) {
	switch r.Method {
	case http.MethodPut, http.MethodPost:
		mib := float64(r.ContentLength) / (1 << 20)
		if mib < 0 {
			mib = 0
		}
		d.wait(d.p.putBase + time.Duration(mib*float64(d.p.putPerMiB)))
		return d.next.RoundTrip(r)
	case http.MethodDelete:
		d.wait(d.p.del)
		return d.next.RoundTrip(r)
	}
	resp, err := d.next.RoundTrip(r)
	if err == nil {
		if isList(r) {
			d.wait(d.p.list)
		} else {
			d.wait(d.p.getFirstByte)
		}
	}
	return resp, err
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on (port 0: a free one)")
	upstream := flag.String("upstream", "", "the S3 server's URL, e.g. http://127.0.0.1:9000 (required)")
	putBase := flag.Duration("put-base", 80*time.Millisecond, "PUT: fixed part of the delay")
	putPerMiB := flag.Duration("put-per-mib", 15*time.Millisecond, "PUT: delay per MiB of body")
	getFirstByte := flag.Duration("get-first-byte", 30*time.Millisecond, "GET/HEAD: delay before the first byte")
	list := flag.Duration("list", 60*time.Millisecond, "LIST: delay before the first byte")
	del := flag.Duration("delete", 20*time.Millisecond, "DELETE: delay")
	jitter := flag.Float64("jitter", 0.35, "sigma of the log-normal factor on every delay (0: none)")
	seed := flag.Int64("seed", 1, "random seed of the jitter")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: s3_latency_proxy -upstream URL [flags]\n\n"+
			"A reverse proxy that adds S3-like latency in front of an S3 server.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *upstream == "" {
		fmt.Fprintln(os.Stderr, "s3_latency_proxy: -upstream is required (the S3 server's URL)")
		os.Exit(2)
	}
	target, err := url.Parse(*upstream)
	if err != nil || target.Scheme == "" || target.Host == "" {
		fmt.Fprintf(os.Stderr, "s3_latency_proxy: -upstream %q is not a URL like http://127.0.0.1:9000\n", *upstream)
		os.Exit(2)
	}
	if *jitter < 0 || *putBase < 0 || *putPerMiB < 0 || *getFirstByte < 0 || *list < 0 || *del < 0 {
		fmt.Fprintln(os.Stderr, "s3_latency_proxy: delays and -jitter must be >= 0")
		os.Exit(2)
	}
	transport := &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: 90 * time.Second,
		DisableCompression: true}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = &delayer{p: profile{*putBase, *putPerMiB, *getFirstByte, *list, *del, *jitter},
		rng: rand.New(rand.NewSource(*seed)), next: transport}
	proxy.FlushInterval = -1
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("s3_latency_proxy: listen %s: %v", *listen, err)
	}
	ready, _ := json.Marshal(map[string]string{"listening": ln.Addr().String(), "upstream": target.String()})
	fmt.Println(string(ready))
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-stop; ln.Close() }()
	server := &http.Server{Handler: proxy, ReadHeaderTimeout: 30 * time.Second}
	if err := server.Serve(ln); err != nil && !strings.Contains(err.Error(), "closed") {
		log.Fatalf("s3_latency_proxy: %v", err)
	}
}
