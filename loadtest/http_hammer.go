// Command http_hammer is the HTTP load generator of the llog load-test harness
// (the reference system's loadtest/http_hammer.go). It drives POST /produce and
// POST /consume against the brokers of a routing manifest and writes the
// client's view of a run into -out:
//
//	client-30s.jsonl     one line per -window
//	client-summary.json  the whole run, with every acknowledged offset range
//	remap-events.jsonl   one line per partition moved to another owner
//
// The formats are in loadtest/README.md ("Load-test harness"). Standard library
// only; build with `go build -o http_hammer loadtest/http_hammer.go`
// (loadtest/_harness/hammer.py builds and caches it).
//
// Routing. A partition is only ever sent to a broker of its owner set (the
// manifest's "owners"; consumers use "read_owners" when the manifest has them).
// round_robin rotates over the live owners per partition, least_inflight takes
// the live owner with the fewest requests in flight. A produce request carries
// batches for up to -partitions-per-request partitions: a lead partition (a
// seeded rotation over all partitions) picks the broker, and the companions are
// other partitions whose owner set also holds that broker. A connect error, a
// timeout or a 503 ShuttingDown/ProducerClosed marks the broker down: every
// partition it owns is remapped to another live broker of its original owner
// set (an event per partition; "to": null when none is left, and requests for
// it then fail as errors.no_owner). A down broker's /health is probed every
// -down-backoff; when it answers, its partitions are remapped back (reason
// "recovered").
//
// Consumers. Consumer i follows partitions i, i+N, ... with POST /consume
// (long-polling -max-wait-ms), one request per broker its partitions route to,
// from each partition's high watermark when the run starts (-consume-from end)
// or from offset 1, checking that offsets follow next_fetch_offset without gaps
// and measuring end-to-end latency from the send time stamped in each payload.
// When producing stops they read on (at most -drain) to the highest
// acknowledged offsets.
//
// Outcomes. What an answer means (definite: nothing was written; unknown: it
// may have been; the broker stopping) is the outcome table of
// server/_protocol/outcomes.py, generated into this file (outcomeTable).
// Offsets are recorded as acknowledged only for batches a broker answered ok
// with offsets (HTTP 200, or the ok batches of a 409). A client timeout, a
// connection broken after sending, a 504 or a 500 InternalError is "unknown"
// for every batch of the request, a per-batch OutcomeUnknown for that batch;
// both are counted and never recorded as acknowledged. Latency percentiles come
// from a log-linear histogram (64 sub-buckets per power of two: at most 1.6%
// above the true value), per window and over the run.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/bits"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	tsDigits     = 16 // hex digits of the send time (unix nanoseconds) at the start of every payload
	tsSeparator  = '|'
	headerBytes  = tsDigits + 1
	fillerLetter = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	// A partition that does not exist yet (nothing written) is asked again after this.
	notReadyRetry = 100 * time.Millisecond
	probeTimeout  = 2 * time.Second
	probeOffset   = 1 << 62 // a fetch_offset past any high watermark
)

// ---------------------------------------------------------------------------- flags

type config struct {
	manifestPath         string
	outDir               string
	mode                 string
	rate                 float64
	concurrency          int
	maxInflight          int
	duration             time.Duration
	recordBytes          int
	body                 string // json or binary (application/vnd.llog.produce.v1)
	consumeBody          string // json or binary (Accept: application/vnd.llog.consume.v2)
	recordsPerRequest    int
	partitionsPerRequest int
	topic                string
	selection            string
	consumers            int
	consumeFrom          string
	maxWaitMs            int
	window               time.Duration
	timeout              time.Duration
	downBackoff          time.Duration
	drain                time.Duration
	seed                 int64
}

const usageHeader = `http_hammer: drive POST /produce (and POST /consume) against llog brokers.

Usage: http_hammer -manifest routing-manifest.json -out DIR [flags]

Records are JSON strings of -record-bytes bytes: 16 hex digits of the send time
(unix nanoseconds), '|', then deterministic filler, so consumers measure
end-to-end latency. Writes client-30s.jsonl, client-summary.json and
remap-events.jsonl into -out (formats: loadtest/README.md). Exit status 0 when
the run completed (even with request errors), 2 for bad flags or an unreadable
manifest, 1 when the output cannot be written.

Flags:
`

// errUsage marks an error the flag package has already printed.
var errUsage = errors.New("usage")

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("http_hammer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usageHeader); fs.PrintDefaults() }
	c := &config{}
	fs.StringVar(&c.manifestPath, "manifest", "", "routing manifest (JSON): the brokers and every partition's owner set (required)")
	fs.StringVar(&c.outDir, "out", "", "directory for client-30s.jsonl, client-summary.json, remap-events.jsonl (required; created)")
	fs.StringVar(&c.mode, "mode", "closed", "open: requests start on a fixed schedule (-rate) whether or not earlier ones finished;\n"+
		"closed: -concurrency requests in flight, each sent when the previous one finished")
	fs.Float64Var(&c.rate, "rate", 10000, "open loop: target records per second (requests per second = rate / -records-per-request)")
	fs.IntVar(&c.concurrency, "concurrency", 16, "closed loop: produce requests in flight")
	fs.IntVar(&c.maxInflight, "max-inflight", 512, "open loop: most produce requests in flight; a request due while this many are\n"+
		"in flight is not sent and counts as errors.backlog (the schedule never waits)")
	fs.DurationVar(&c.duration, "duration", 30*time.Second, "how long to produce")
	fs.IntVar(&c.recordBytes, "record-bytes", 1024, fmt.Sprintf("bytes per record (>= %d: the timestamp header)", headerBytes))
	fs.StringVar(&c.body, "body", "json", "produce body: json, or binary (application/vnd.llog.produce.v1: each batch a\n"+
		"bytes-batch-v1 batch the broker splices into its WAL blob as it is)")
	fs.IntVar(&c.recordsPerRequest, "records-per-request", 100, "records per produce request, split evenly over its partitions")
	fs.IntVar(&c.partitionsPerRequest, "partitions-per-request", 1, "partitions (batches) per produce request; all share the broker the request goes to")
	fs.StringVar(&c.topic, "topic", "", "use only the manifest's partitions of this topic (default: all of them)")
	fs.StringVar(&c.selection, "selection", "", "round_robin or least_inflight: how a broker is chosen inside a partition's owner set\n"+
		"(default: the manifest's \"selection\", else round_robin)")
	fs.IntVar(&c.consumers, "consumers", 0, "consumer goroutines; each follows every N-th partition with POST /consume (0: no consume load)")
	fs.StringVar(&c.consumeFrom, "consume-from", "end", "where consumers start: end (each partition's high watermark, asked before the load\n"+
		"starts, so only this run's records count) or start (offset 1)")
	fs.IntVar(&c.maxWaitMs, "max-wait-ms", 500, "consume long-poll max_wait_ms")
	fs.StringVar(&c.consumeBody, "consume-body", "json", "consume answer: json, or binary (Accept: application/vnd.llog.consume.v2: each\n"+
		"partition's records as the stored RecordBatch v2 batches)")
	fs.DurationVar(&c.window, "window", 30*time.Second, "length of a client-30s.jsonl window (and of the progress lines)")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "per-request timeout (a consume gets -max-wait-ms on top); a produce that times out is unknown")
	fs.DurationVar(&c.downBackoff, "down-backoff", time.Second, "how often a broker marked down is probed (GET /health) to bring it back")
	fs.DurationVar(&c.drain, "drain", 5*time.Second, "after producing stops, how long consumers may keep reading to catch up with the acknowledged records")
	fs.Int64Var(&c.seed, "seed", 1, "seed of the partition rotation and the payload filler")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, errUsage
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q (every option is a -flag)", fs.Args())
	}
	return c, c.validate()
}

func (c *config) validate() error {
	switch {
	case c.manifestPath == "":
		return errors.New("-manifest is required")
	case c.outDir == "":
		return errors.New("-out is required")
	case c.mode != "open" && c.mode != "closed":
		return fmt.Errorf("-mode must be open or closed, got %q", c.mode)
	case c.mode == "open" && !(c.rate > 0 && c.rate < math.Inf(1)):
		return fmt.Errorf("-rate must be > 0 in open mode, got %g", c.rate)
	case c.concurrency < 1:
		return fmt.Errorf("-concurrency must be >= 1, got %d", c.concurrency)
	case c.maxInflight < 1:
		return fmt.Errorf("-max-inflight must be >= 1, got %d", c.maxInflight)
	case c.duration <= 0:
		return fmt.Errorf("-duration must be > 0, got %s", c.duration)
	case c.recordBytes < headerBytes:
		return fmt.Errorf("-record-bytes must be >= %d (the timestamp header), got %d", headerBytes, c.recordBytes)
	case c.body != "json" && c.body != "binary":
		return fmt.Errorf("-body must be json or binary, got %q", c.body)
	case c.consumeBody != "json" && c.consumeBody != "binary":
		return fmt.Errorf("-consume-body must be json or binary, got %q", c.consumeBody)
	case c.recordsPerRequest < 1:
		return fmt.Errorf("-records-per-request must be >= 1, got %d", c.recordsPerRequest)
	case c.partitionsPerRequest < 1:
		return fmt.Errorf("-partitions-per-request must be >= 1, got %d", c.partitionsPerRequest)
	case c.selection != "" && c.selection != "round_robin" && c.selection != "least_inflight":
		return fmt.Errorf("-selection must be round_robin or least_inflight, got %q", c.selection)
	case c.consumers < 0:
		return fmt.Errorf("-consumers must be >= 0, got %d", c.consumers)
	case c.consumeFrom != "end" && c.consumeFrom != "start":
		return fmt.Errorf("-consume-from must be end or start, got %q", c.consumeFrom)
	case c.maxWaitMs < 0:
		return fmt.Errorf("-max-wait-ms must be >= 0, got %d", c.maxWaitMs)
	case c.window <= 0:
		return fmt.Errorf("-window must be > 0, got %s", c.window)
	case c.timeout <= 0:
		return fmt.Errorf("-timeout must be > 0, got %s", c.timeout)
	case c.downBackoff <= 0:
		return fmt.Errorf("-down-backoff must be > 0, got %s", c.downBackoff)
	case c.drain < 0:
		return fmt.Errorf("-drain must be >= 0, got %s", c.drain)
	}
	return nil
}

// ------------------------------------------------------------------------- manifest

type manifestBroker struct {
	BrokerID string `json:"broker_id"`
	URL      string `json:"url"`
	Role     string `json:"role"`
}

type manifestPartition struct {
	Topic      string   `json:"topic"`
	Partition  int      `json:"partition"`
	Owners     []string `json:"owners"`
	ReadOwners []string `json:"read_owners"`
}

type manifest struct {
	Seed               int64               `json:"seed"`
	OwnersPerPartition int                 `json:"owners_per_partition"`
	Selection          string              `json:"selection"`
	Brokers            []manifestBroker    `json:"brokers"`
	Partitions         []manifestPartition `json:"partitions"`
}

func loadManifest(path string) (*manifest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the manifest: %w", err)
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("manifest %s is not valid JSON of the expected shape: %w", path, err)
	}
	if len(m.Brokers) == 0 {
		return nil, fmt.Errorf("manifest %s names no brokers", path)
	}
	if len(m.Partitions) == 0 {
		return nil, fmt.Errorf("manifest %s names no partitions", path)
	}
	return &m, nil
}

// -------------------------------------------------------------------------- routing

type broker struct {
	id                                string
	produceURL, consumeURL, healthURL string
	inflight                          atomic.Int64
	down                              atomic.Bool
	companion                         atomic.Uint64 // rotation over the partitions it owns
}

type partition struct {
	topic      string
	topicJSON  []byte
	num        int
	key        string // "topic:partition", the key of client-summary.json's "acked"
	owners     []*broker
	readOwners []*broker // the owners when the manifest has no read_owners
	hasReadSet bool
	rr, rrRead atomic.Uint64
}

type remapEvent struct {
	TsMs      int64   `json:"ts_ms"`
	Topic     string  `json:"topic"`
	Partition int     `json:"partition"`
	From      *string `json:"from"`
	To        *string `json:"to"`
	Reason    string  `json:"reason"`
	Set       string  `json:"set,omitempty"` // "read" for a read_owners set; absent for the owners
}

type router struct {
	leastInflight bool
	parts         []*partition
	owned         map[*broker][]*partition // partitions whose owner set holds the broker
	client        *http.Client
	backoff       time.Duration
	ctx           context.Context // ends the /health probes

	mu      sync.Mutex // serializes down/up transitions and the event file
	events  *bufio.Writer
	onRemap func()
}

func newRouter(m *manifest, cfg *config) (*router, []*broker, error) {
	byID := map[string]*broker{}
	var brokers []*broker
	for i, mb := range m.Brokers {
		if mb.BrokerID == "" || mb.URL == "" {
			return nil, nil, fmt.Errorf("manifest brokers[%d] needs broker_id and url", i)
		}
		if _, dup := byID[mb.BrokerID]; dup {
			return nil, nil, fmt.Errorf("manifest names broker %q twice", mb.BrokerID)
		}
		base := strings.TrimRight(mb.URL, "/")
		b := &broker{id: mb.BrokerID, produceURL: base + "/produce", consumeURL: base + "/consume", healthURL: base + "/health"}
		byID[mb.BrokerID] = b
		brokers = append(brokers, b)
	}
	lookup := func(ids []string, where string) ([]*broker, error) {
		out := make([]*broker, 0, len(ids))
		for _, id := range ids {
			b, ok := byID[id]
			if !ok {
				return nil, fmt.Errorf("manifest %s names unknown broker %q", where, id)
			}
			out = append(out, b)
		}
		return out, nil
	}
	r := &router{leastInflight: cfg.selection == "least_inflight", owned: map[*broker][]*partition{}, backoff: cfg.downBackoff}
	seen := map[string]bool{}
	for i, mp := range m.Partitions {
		if cfg.topic != "" && mp.Topic != cfg.topic {
			continue
		}
		where := fmt.Sprintf("partitions[%d]", i)
		if mp.Topic == "" || mp.Partition < 0 || len(mp.Owners) == 0 {
			return nil, nil, fmt.Errorf("manifest %s needs a topic, a partition >= 0 and owners", where)
		}
		p := &partition{topic: mp.Topic, num: mp.Partition, key: fmt.Sprintf("%s:%d", mp.Topic, mp.Partition)}
		if seen[p.key] {
			return nil, nil, fmt.Errorf("manifest names partition %s twice", p.key)
		}
		seen[p.key] = true
		p.topicJSON, _ = json.Marshal(mp.Topic)
		var err error
		if p.owners, err = lookup(mp.Owners, where+".owners"); err != nil {
			return nil, nil, err
		}
		p.readOwners = p.owners
		if len(mp.ReadOwners) > 0 {
			if p.readOwners, err = lookup(mp.ReadOwners, where+".read_owners"); err != nil {
				return nil, nil, err
			}
			p.hasReadSet = true
		}
		for _, b := range p.owners {
			r.owned[b] = append(r.owned[b], p)
		}
		r.parts = append(r.parts, p)
	}
	if len(r.parts) == 0 {
		return nil, nil, fmt.Errorf("the manifest has no partitions of topic %q", cfg.topic)
	}
	return r, brokers, nil
}

// pick chooses a live broker of owners (nil when none is live). round_robin
// starts at the next owner in the partition's rotation and takes the first live
// one; least_inflight takes the live owner with the fewest requests in flight,
// ties going round the rotation so an idle cluster still spreads the load.
func (r *router) pick(owners []*broker, rr *atomic.Uint64) *broker {
	n := len(owners)
	start := int(rr.Add(1) % uint64(n))
	var best *broker
	var bestLoad int64
	for i := range n {
		b := owners[(start+i)%n]
		if b.down.Load() {
			continue
		}
		if !r.leastInflight {
			return b
		}
		if load := b.inflight.Load(); best == nil || load < bestLoad {
			best, bestLoad = b, load
		}
	}
	return best
}

func firstLive(owners []*broker, except *broker) *broker {
	for _, b := range owners {
		if b != except && !b.down.Load() {
			return b
		}
	}
	return nil
}

func holds(owners []*broker, b *broker) bool {
	for _, o := range owners {
		if o == b {
			return true
		}
	}
	return false
}

// markDown takes b out of every owner set it is in (once: later failures of a
// broker already down change nothing) and starts probing it.
func (r *router) markDown(b *broker, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b.down.Load() {
		return
	}
	b.down.Store(true)
	r.remapAll(b, reason, func(owners []*broker) (from, to *broker) { return b, firstLive(owners, b) })
	go r.probe(b)
}

func (r *router) markUp(b *broker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !b.down.Load() {
		return
	}
	// "from" is the owner that took the partition's traffic while b was down.
	r.remapAll(b, "recovered", func(owners []*broker) (from, to *broker) { return firstLive(owners, b), b })
	b.down.Store(false)
}

func (r *router) remapAll(b *broker, reason string, fromTo func([]*broker) (*broker, *broker)) {
	now := time.Now().UnixMilli()
	for _, p := range r.parts {
		if holds(p.owners, b) {
			from, to := fromTo(p.owners)
			r.writeEvent(remapEvent{TsMs: now, Topic: p.topic, Partition: p.num, From: idOf(from), To: idOf(to), Reason: reason})
		}
		if p.hasReadSet && holds(p.readOwners, b) {
			from, to := fromTo(p.readOwners)
			r.writeEvent(remapEvent{TsMs: now, Topic: p.topic, Partition: p.num, From: idOf(from), To: idOf(to), Reason: reason, Set: "read"})
		}
	}
	if err := r.events.Flush(); err != nil {
		fmt.Fprintf(os.Stderr, "[hammer] cannot write remap-events.jsonl: %v\n", err)
	}
}

func (r *router) writeEvent(ev remapEvent) {
	line, _ := json.Marshal(ev)
	r.events.Write(line)
	r.events.WriteByte('\n')
	r.onRemap()
}

func idOf(b *broker) *string {
	if b == nil {
		return nil
	}
	return &b.id
}

// probe asks a down broker's /health every backoff until it answers 200.
func (r *router) probe(b *broker) {
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(r.backoff):
		}
		ctx, cancel := context.WithTimeout(r.ctx, min(probeTimeout, r.backoff*2))
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.healthURL, nil)
		resp, err := r.client.Do(req)
		ok := err == nil && resp.StatusCode == http.StatusOK
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		cancel()
		if ok && r.ctx.Err() == nil {
			r.markUp(b)
			return
		}
	}
}

// ------------------------------------------------------------------------ histogram

// A log-linear histogram of microseconds: values below 128 exact, then 64
// sub-buckets per power of two up to 2^41 us (25 days).
const (
	subBits   = 6
	subCount  = 1 << subBits
	linearMax = 2 * subCount
	maxExp    = 40
	nBuckets  = linearMax + (maxExp-7+1)*subCount
)

type histogram struct {
	counts [nBuckets]uint64
	n      uint64
	sum    float64
	max    int64
}

func bucketOf(v int64) int {
	if v < linearMax {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - 1
	if e > maxExp {
		return nBuckets - 1
	}
	return linearMax + (e-7)*subCount + int(v>>(e-subBits)) - subCount
}

// bucketHigh is the largest value of bucket i.
func bucketHigh(i int) int64 {
	if i < linearMax {
		return int64(i)
	}
	e := (i-linearMax)/subCount + 7
	sub := (i - linearMax) % subCount
	shift := e - subBits
	return int64(subCount+sub)<<shift + 1<<shift - 1
}

func (h *histogram) record(d time.Duration) {
	us := d.Microseconds()
	h.counts[bucketOf(us)]++
	h.n++
	h.sum += float64(us)
	h.max = max(h.max, us)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile in microseconds: the highest value of the bucket holding the
// q-th sample, never above the largest value recorded.
func (h *histogram) quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(bucketHigh(i), h.max)
		}
	}
	return h.max
}

type latencyJSON struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
}

func ms(us int64) float64 { return math.Round(float64(us)) / 1000 }

func (h *histogram) json() latencyJSON {
	out := latencyJSON{Count: h.n, P50: ms(h.quantile(0.50)), P90: ms(h.quantile(0.90)), P99: ms(h.quantile(0.99)),
		P999: ms(h.quantile(0.999)), Max: ms(h.max)}
	if h.n > 0 {
		out.Mean = math.Round(h.sum/float64(h.n)) / 1000
	}
	return out
}

// ---------------------------------------------------------------------- statistics

type sideStats struct {
	requests, okRequests   int64
	sentRecords, sentBytes int64
	records, bytes         int64 // produce: acknowledged; consume: received
	unknownRequests        int64
	unknownBatches         int64
	failedBatches          int64
	status                 map[string]int64
	errors                 map[string]int64
	latency, e2e, lag      histogram
}

func newSide() *sideStats {
	return &sideStats{status: map[string]int64{}, errors: map[string]int64{}}
}

func (s *sideStats) merge(o *sideStats) {
	s.requests += o.requests
	s.okRequests += o.okRequests
	s.sentRecords += o.sentRecords
	s.sentBytes += o.sentBytes
	s.records += o.records
	s.bytes += o.bytes
	s.unknownRequests += o.unknownRequests
	s.unknownBatches += o.unknownBatches
	s.failedBatches += o.failedBatches
	for k, v := range o.status {
		s.status[k] += v
	}
	for k, v := range o.errors {
		s.errors[k] += v
	}
	s.latency.merge(&o.latency)
	s.e2e.merge(&o.e2e)
	s.lag.merge(&o.lag)
}

type windowStats struct {
	start            time.Time
	produce, consume *sideStats
	remaps           int64
}

func newWindow(start time.Time) *windowStats {
	return &windowStats{start: start, produce: newSide(), consume: newSide()}
}

// recorder holds the current window, the run so far and the acknowledged
// ranges; every update takes its one lock.
type recorder struct {
	mu    sync.Mutex
	cur   *windowStats
	total *windowStats
	acked map[string][][2]int64
	// per partition, the highest acknowledged offset: what consumers drain to
	ackedEnd map[string]int64
}

// ackedBatch is one batch a broker acknowledged with offsets.
type ackedBatch struct {
	key        string
	start, end int64
}

// produceOutcome is what one produce attempt did.
type produceOutcome struct {
	sent           bool   // an HTTP request went out
	status         int    // 0: no answer
	errKey         string // "": no error
	latency        time.Duration
	lag            time.Duration // open loop: how late the request started
	hasLag         bool
	records, bytes int64 // sent
	acked          []ackedBatch
	ackedRecords   int64
	unknownRequest bool
	unknownBatches int64
	failedBatches  int64
	recordBytes    int64
}

func (r *recorder) produce(o *produceOutcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.cur.produce
	if o.hasLag {
		s.lag.record(o.lag)
	}
	if o.errKey != "" {
		s.errors[o.errKey]++
	}
	if !o.sent {
		return
	}
	s.requests++
	s.sentRecords += o.records
	s.sentBytes += o.bytes
	if o.status != 0 {
		s.status[strconv.Itoa(o.status)]++
		s.latency.record(o.latency)
	}
	if o.status == http.StatusOK {
		s.okRequests++
	}
	if o.unknownRequest {
		s.unknownRequests++
	}
	s.unknownBatches += o.unknownBatches
	s.failedBatches += o.failedBatches
	s.records += o.ackedRecords
	s.bytes += o.ackedRecords * o.recordBytes
	for _, a := range o.acked {
		r.acked[a.key] = append(r.acked[a.key], [2]int64{a.start, a.end})
		r.ackedEnd[a.key] = max(r.ackedEnd[a.key], a.end)
	}
}

func (r *recorder) produceNotSent(errKey string, lag time.Duration, hasLag bool) {
	r.produce(&produceOutcome{errKey: errKey, lag: lag, hasLag: hasLag})
}

// consumeOutcome is what one consume request did.
type consumeOutcome struct {
	sent           bool
	status         int
	errKeys        []string
	latency        time.Duration
	records, bytes int64
	e2e            []time.Duration
}

func (r *recorder) consume(o *consumeOutcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.cur.consume
	for _, k := range o.errKeys {
		s.errors[k]++
	}
	if !o.sent {
		return
	}
	s.requests++
	if o.status != 0 {
		s.status[strconv.Itoa(o.status)]++
		s.latency.record(o.latency)
	}
	if o.status == http.StatusOK {
		s.okRequests++
	}
	s.records += o.records
	s.bytes += o.bytes
	for _, d := range o.e2e {
		s.e2e.record(d)
	}
}

func (r *recorder) remap() {
	r.mu.Lock()
	r.cur.remaps++
	r.mu.Unlock()
}

// rotate closes the current window at now and returns it (already merged into the total).
func (r *recorder) rotate(now time.Time) *windowStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	done := r.cur
	r.cur = newWindow(now)
	r.total.produce.merge(done.produce)
	r.total.consume.merge(done.consume)
	r.total.remaps += done.remaps
	return done
}

func (r *recorder) ackedEnds() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int64, len(r.ackedEnd))
	for k, v := range r.ackedEnd {
		out[k] = v
	}
	return out
}

// mergedAcked sorts and merges every partition's ranges (inclusive; adjacent ranges join).
func (r *recorder) mergedAcked() map[string][][2]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string][][2]int64, len(r.acked))
	for key, ranges := range r.acked {
		sorted := append([][2]int64(nil), ranges...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i][0] < sorted[j][0] })
		merged := [][2]int64{sorted[0]}
		for _, rg := range sorted[1:] {
			last := &merged[len(merged)-1]
			if rg[0] <= last[1]+1 {
				last[1] = max(last[1], rg[1])
			} else {
				merged = append(merged, rg)
			}
		}
		out[key] = merged
	}
	return out
}

// --------------------------------------------------------------------- the hammer

type hammer struct {
	cfg     *config
	m       *manifest
	router  *router
	brokers []*broker
	client  *http.Client
	rec     *recorder
	order   []*partition // seeded rotation of lead partitions
	leadSeq atomic.Uint64
	filler  []byte

	windowFile *bufio.Writer
	windowN    int
}

func newHammer(cfg *config, m *manifest) (*hammer, error) {
	if cfg.selection == "" {
		cfg.selection = m.Selection
		if cfg.selection == "" {
			cfg.selection = "round_robin"
		}
		if err := cfg.validate(); err != nil {
			return nil, fmt.Errorf("the manifest's selection: %w", err)
		}
	}
	r, brokers, err := newRouter(m, cfg)
	if err != nil {
		return nil, err
	}
	idle := cfg.concurrency + 2*cfg.consumers + 8
	if cfg.mode == "open" {
		idle = cfg.maxInflight + 2*cfg.consumers + 8
	}
	transport := &http.Transport{
		Proxy:               nil, // loopback and lab networks: never through a proxy
		DialContext:         (&net.Dialer{Timeout: min(cfg.timeout, 5*time.Second), KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: idle,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	client := &http.Client{Transport: transport}
	r.client = client
	rng := rand.New(rand.NewSource(cfg.seed))
	order := make([]*partition, len(r.parts))
	for i, j := range rng.Perm(len(r.parts)) {
		order[i] = r.parts[j]
	}
	filler := make([]byte, cfg.recordBytes-headerBytes)
	offset := int(uint64(cfg.seed) % uint64(len(fillerLetter)))
	for i := range filler {
		filler[i] = fillerLetter[(i+offset)%len(fillerLetter)]
	}
	return &hammer{cfg: cfg, m: m, router: r, brokers: brokers, client: client, order: order, filler: filler}, nil
}

// -- produce

type batchPlan struct {
	p *partition
	n int
}

// plan returns the batches of one request to b: lead first, then companions
// (other partitions b owns), records split evenly.
func (h *hammer) plan(lead *partition, b *broker) []batchPlan {
	k := min(h.cfg.partitionsPerRequest, h.cfg.recordsPerRequest)
	parts := []*partition{lead}
	if cands := h.router.owned[b]; k > 1 && len(cands) > 1 {
		start := int(b.companion.Add(1) % uint64(len(cands)))
		for i := 0; i < len(cands) && len(parts) < k; i++ {
			if c := cands[(start+i)%len(cands)]; c != lead {
				parts = append(parts, c)
			}
		}
	}
	plan := make([]batchPlan, len(parts))
	per, extra := h.cfg.recordsPerRequest/len(parts), h.cfg.recordsPerRequest%len(parts)
	for i, p := range parts {
		plan[i] = batchPlan{p: p, n: per}
		if i < extra {
			plan[i].n++
		}
	}
	return plan
}

func appendTimestamp(dst []byte, now time.Time) []byte {
	var digits [tsDigits]byte
	v := uint64(now.UnixNano())
	for i := tsDigits - 1; i >= 0; i-- {
		digits[i] = "0123456789abcdef"[v&0xf]
		v >>= 4
	}
	return append(append(dst, digits[:]...), tsSeparator)
}

// appendPartition opens a topic_partitions item: {"topic":...,"partition":N
func appendPartition(buf []byte, p *partition) []byte {
	buf = append(buf, `{"topic":`...)
	buf = append(buf, p.topicJSON...)
	buf = append(buf, `,"partition":`...)
	return strconv.AppendInt(buf, int64(p.num), 10)
}

func (h *hammer) produceBody(plan []batchPlan, now time.Time) []byte {
	buf := make([]byte, 0, h.cfg.recordsPerRequest*(h.cfg.recordBytes+3)+len(plan)*96+32)
	header := appendTimestamp(make([]byte, 0, headerBytes), now)
	buf = append(buf, `{"topic_partitions":[`...)
	for i, bp := range plan {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendPartition(buf, bp.p)
		buf = append(buf, `,"records":[`...)
		for j := range bp.n {
			if j > 0 {
				buf = append(buf, ',')
			}
			buf = append(buf, '"')
			buf = append(buf, header...)
			buf = append(buf, h.filler...)
			buf = append(buf, '"')
		}
		buf = append(buf, "]}"...)
	}
	return append(buf, "]}"...)
}

const binaryContentType = "application/vnd.llog.produce.v1"

// produceBodyBinary is produceBody's records in the binary layout
// (server/_protocol/produce_binary.py): "LLP1", version 1, flags 0, batch count, then
// per batch a u16-prefixed topic, a u32 partition and a bytes-batch-v1 batch
// (magic "LLB1", version 1, flags 0, record count, records length, CRC-32 of
// the records, then each record as a u32 length and its bytes); big-endian.
func (h *hammer) produceBodyBinary(plan []batchPlan, now time.Time) []byte {
	recLen := headerBytes + len(h.filler)
	buf := make([]byte, 0, h.cfg.recordsPerRequest*(recLen+4)+len(plan)*(32+len(plan[0].p.topic))+12)
	header := appendTimestamp(make([]byte, 0, headerBytes), now)
	buf = append(buf, "LLP1"...)
	buf = binary.BigEndian.AppendUint16(buf, 1)
	buf = binary.BigEndian.AppendUint16(buf, 0)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(plan)))
	for _, bp := range plan {
		buf = binary.BigEndian.AppendUint16(buf, uint16(len(bp.p.topic)))
		buf = append(buf, bp.p.topic...)
		buf = binary.BigEndian.AppendUint32(buf, uint32(bp.p.num))
		at := len(buf)
		buf = append(buf, "LLB1"...)
		buf = binary.BigEndian.AppendUint16(buf, 1)
		buf = binary.BigEndian.AppendUint16(buf, 0)
		buf = binary.BigEndian.AppendUint32(buf, uint32(bp.n))
		buf = append(buf, make([]byte, 8)...) // records length and CRC, filled in below
		start := len(buf)
		for range bp.n {
			buf = binary.BigEndian.AppendUint32(buf, uint32(recLen))
			buf = append(buf, header...)
			buf = append(buf, h.filler...)
		}
		binary.BigEndian.PutUint32(buf[at+12:], uint32(len(buf)-start))
		binary.BigEndian.PutUint32(buf[at+16:], crc32.ChecksumIEEE(buf[start:]))
	}
	return buf
}

type produceResult struct {
	Ok          bool   `json:"ok"`
	StartOffset *int64 `json:"start_offset"`
	EndOffset   *int64 `json:"end_offset"`
	ErrorType   string `json:"error_type"`
}

type answer struct {
	Results   []produceResult `json:"results"`
	ErrorType string          `json:"error_type"`
}

// produceOnce sends one produce request (or records why it could not);
// false when no broker was left for the lead partition.
func (h *hammer) produceOnce(scheduled time.Time, open bool) bool {
	o := &produceOutcome{recordBytes: int64(h.cfg.recordBytes)}
	if open {
		o.lag, o.hasLag = time.Since(scheduled), true
	}
	lead := h.order[(h.leadSeq.Add(1)-1)%uint64(len(h.order))]
	b := h.router.pick(lead.owners, &lead.rr)
	if b == nil {
		o.errKey = "no_owner"
		h.rec.produce(o)
		return false
	}
	plan := h.plan(lead, b)
	now := time.Now()
	body, ctype := []byte(nil), "application/json"
	if h.cfg.body == "binary" {
		body, ctype = h.produceBodyBinary(plan, now), binaryContentType
	} else {
		body = h.produceBody(plan, now)
	}
	o.sent, o.records, o.bytes = true, int64(h.cfg.recordsPerRequest), int64(h.cfg.recordsPerRequest*h.cfg.recordBytes)
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.timeout)
	defer cancel()
	b.inflight.Add(1)
	status, doc, reason, err := h.post(ctx, b.produceURL, body, ctype, "")
	b.inflight.Add(-1)
	o.latency = time.Since(now)
	h.classifyProduce(o, plan, b, status, doc, reason, err)
	h.rec.produce(o)
	return true
}

// post sends a body (JSON, or the binary produce body), with an Accept header when accept is not
// empty, and reads the whole answer. Without an answer, reason is connect (nothing was sent),
// timeout or disconnect (sent, no answer).
func (h *hammer) post(ctx context.Context, url string, body []byte, contentType, accept string) (status int, doc []byte, reason string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, "connect", err
	}
	req.Header.Set("Content-Type", contentType)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, nil, transportReason(err), err
	}
	doc, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, nil, transportReason(err), err
	}
	return resp.StatusCode, doc, "", nil
}

func transportReason(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return "connect"
	}
	var nerr net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &nerr) && nerr.Timeout()) {
		return "timeout"
	}
	return "disconnect"
}

// BEGIN outcomes: generated by `python -m server._protocol.outcomes --go` from
// server/_protocol/outcomes.py; tests/unit/test_outcomes.py checks that it matches.

// outcome is what an answer's error_type means.
type outcome struct {
	status    int    // the HTTP status it is answered with; 0: none of its own
	retriable bool   // the same request sent again can succeed
	kind      string // kindDefinite, kindUnknown or kindSuccess
	errorCode string // a consume partition's error_code
	stopping  bool   // the broker is shutting down: send to another broker
	perItem   bool   // results[] hold one outcome per batch
}

const (
	kindDefinite = "definite" // nothing was written, now or later
	kindUnknown  = "unknown"  // it may have been written
	kindSuccess  = "success"
)

const (
	errorTypeInvalidRequest          = "InvalidRequest"
	errorTypeRoleNotServed           = "RoleNotServed"
	errorTypeNotFound                = "NotFound"
	errorTypeMethodNotAllowed        = "MethodNotAllowed"
	errorTypeAppendFailed            = "AppendFailed"
	errorTypeRequestTimeout          = "RequestTimeout"
	errorTypeLengthRequired          = "LengthRequired"
	errorTypeRequestTooLarge         = "RequestTooLarge"
	errorTypeInternalError           = "InternalError"
	errorTypeBackPressureRejected    = "BackPressureRejected"
	errorTypeShuttingDown            = "ShuttingDown"
	errorTypeProducerClosed          = "ProducerClosed"
	errorTypeOutcomeUnknown          = "OutcomeUnknown"
	errorTypeHttpProtocolError       = "HttpProtocolError"
	errorTypeUnknownTopic            = "UnknownTopic"
	errorTypeTopicAlreadyExists      = "TopicAlreadyExists"
	errorTypeUnknownGroup            = "UnknownGroup"
	errorTypeStaleGeneration         = "StaleGeneration"
	errorTypePartitionNotInitialized = "PartitionNotInitialized"
	errorTypeOffsetOutOfRange        = "OffsetOutOfRange"
	errorTypePartitionFenced         = "PartitionFenced"
	errorTypeOutOfOrderSequence      = "OutOfOrderSequence"
	errorTypeProducerFenced          = "ProducerFenced"
	errorTypeConcurrencyConflict     = "ConcurrencyConflict"
	errorTypeCorruptBatch            = "CorruptBatch"
	errorTypeInconsistentReadState   = "InconsistentReadState"
	errorTypeStorageError            = "StorageError"
	errorTypeMetadataStoreError      = "MetadataStoreError"
	errorTypeObjectStoreError        = "ObjectStoreError"
	errorTypeObjectNotFound          = "ObjectNotFound"
	errorTypeLlogError               = "LlogError"
	errorTypeConnectionRefused       = "ConnectionRefused"
	errorTypeConnectionLost          = "ConnectionLost"
	errorTypeProtocolError           = "ProtocolError"
)

const (
	errorCodeCorruptMessage          = "CORRUPT_MESSAGE"
	errorCodeInconsistentReadState   = "INCONSISTENT_READ_STATE"
	errorCodeInvalidRequest          = "INVALID_REQUEST"
	errorCodeOffsetOutOfRange        = "OFFSET_OUT_OF_RANGE"
	errorCodeStorageError            = "STORAGE_ERROR"
	errorCodeUnknownServerError      = "UNKNOWN_SERVER_ERROR"
	errorCodeUnknownTopicOrPartition = "UNKNOWN_TOPIC_OR_PARTITION"
)

var outcomeTable = map[string]outcome{
	errorTypeInvalidRequest:          {status: 400, kind: kindDefinite, errorCode: errorCodeInvalidRequest},
	errorTypeRoleNotServed:           {status: 403, kind: kindDefinite},
	errorTypeNotFound:                {status: 404, kind: kindDefinite},
	errorTypeMethodNotAllowed:        {status: 405, kind: kindDefinite},
	errorTypeAppendFailed:            {status: 409, kind: kindUnknown, perItem: true},
	errorTypeRequestTimeout:          {status: 408, retriable: true, kind: kindDefinite},
	errorTypeLengthRequired:          {status: 411, kind: kindDefinite},
	errorTypeRequestTooLarge:         {status: 413, kind: kindDefinite},
	errorTypeInternalError:           {status: 500, kind: kindUnknown},
	errorTypeBackPressureRejected:    {status: 503, retriable: true, kind: kindDefinite, perItem: true},
	errorTypeShuttingDown:            {status: 503, retriable: true, kind: kindDefinite, stopping: true},
	errorTypeProducerClosed:          {status: 503, retriable: true, kind: kindDefinite, stopping: true},
	errorTypeOutcomeUnknown:          {status: 504, retriable: true, kind: kindUnknown},
	errorTypeHttpProtocolError:       {kind: kindDefinite},
	errorTypeUnknownTopic:            {status: 404, kind: kindDefinite, errorCode: errorCodeUnknownTopicOrPartition},
	errorTypeTopicAlreadyExists:      {status: 409, kind: kindDefinite},
	errorTypeUnknownGroup:            {status: 404, kind: kindDefinite},
	errorTypeStaleGeneration:         {status: 409, kind: kindDefinite},
	errorTypePartitionNotInitialized: {kind: kindDefinite, errorCode: errorCodeUnknownTopicOrPartition},
	errorTypeOffsetOutOfRange:        {kind: kindDefinite, errorCode: errorCodeOffsetOutOfRange},
	errorTypePartitionFenced:         {kind: kindDefinite},
	errorTypeOutOfOrderSequence:      {retriable: true, kind: kindDefinite},
	errorTypeProducerFenced:          {kind: kindDefinite},
	errorTypeConcurrencyConflict:     {retriable: true, kind: kindDefinite},
	errorTypeCorruptBatch:            {kind: kindDefinite, errorCode: errorCodeCorruptMessage},
	errorTypeInconsistentReadState:   {kind: kindDefinite, errorCode: errorCodeInconsistentReadState},
	errorTypeStorageError:            {retriable: true, kind: kindDefinite, errorCode: errorCodeStorageError},
	errorTypeMetadataStoreError:      {retriable: true, kind: kindDefinite, errorCode: errorCodeStorageError},
	errorTypeObjectStoreError:        {retriable: true, kind: kindDefinite, errorCode: errorCodeStorageError},
	errorTypeObjectNotFound:          {kind: kindDefinite, errorCode: errorCodeStorageError},
	errorTypeLlogError:               {kind: kindUnknown, errorCode: errorCodeUnknownServerError},
	errorTypeConnectionRefused:       {retriable: true, kind: kindDefinite},
	errorTypeConnectionLost:          {retriable: true, kind: kindUnknown},
	errorTypeProtocolError:           {kind: kindUnknown},
}

// unnamedOutcomes: an answer whose error_type names no row, by its status (first..last).
var unnamedOutcomes = []struct {
	first, last int
	outcome     outcome
}{
	{200, 299, outcome{status: 200, kind: kindSuccess, perItem: true}},
	{400, 499, outcome{kind: kindDefinite}},
	{502, 502, outcome{retriable: true, kind: kindUnknown}},
	{503, 503, outcome{retriable: true, kind: kindDefinite}},
	{504, 504, outcome{retriable: true, kind: kindUnknown}},
}

// unnamedOther: an unnamed answer of any other status.
var unnamedOther = outcome{kind: kindUnknown}

// unnamedItem: a failed results[] item whose error_type names no row.
var unnamedItem = outcome{kind: kindDefinite}

// END outcomes

// answerOutcome is what a whole answer means: the row its error_type names,
// else the outcome of its status.
func answerOutcome(status int, errorType string) outcome {
	if o, ok := outcomeTable[errorType]; ok {
		return o
	}
	for _, r := range unnamedOutcomes {
		if r.first <= status && status <= r.last {
			return r.outcome
		}
	}
	return unnamedOther
}

// batchOutcome is what a failed results[] item means: the row its error_type
// names (definite when it names none: every batch error but OutcomeUnknown is).
func batchOutcome(errorType string) outcome {
	if o, ok := outcomeTable[errorType]; ok {
		return o
	}
	return unnamedItem
}

// remapReason is the remap-events.jsonl reason for a failure that marks a broker down.
func remapReason(reason string) string {
	if reason == "disconnect" {
		return "connect" // the connection broke: the broker is gone as surely as when it refuses
	}
	return reason
}

func (h *hammer) classifyProduce(o *produceOutcome, plan []batchPlan, b *broker, status int, doc []byte, reason string, err error) {
	n := int64(len(plan))
	if err != nil {
		o.errKey = reason
		lost := outcomeTable[errorTypeConnectionLost] // sent, no answer
		if reason == "connect" {
			lost = outcomeTable[errorTypeConnectionRefused] // nothing was sent
		}
		o.countWhole(lost, n)
		h.router.markDown(b, remapReason(reason))
		return
	}
	o.status = status
	var a answer
	parsed := json.Unmarshal(doc, &a) == nil
	row := answerOutcome(status, a.ErrorType)
	perBatch := parsed && row.perItem && len(a.Results) == len(plan)
	switch {
	case status == 200:
	case status == 409:
		o.errKey = "partial"
	case a.ErrorType == errorTypeBackPressureRejected:
		o.errKey = "backpressure"
	case row.stopping:
		o.errKey = "shutting_down"
		h.router.markDown(b, "http_503")
	case status == 504:
		o.errKey = "outcome_unknown"
	case status >= 400 && status < 500:
		o.errKey = "http_4xx"
	default:
		o.errKey = "http_5xx"
	}
	if !perBatch {
		if row.perItem { // an answer whose results we cannot read
			row = outcomeTable[errorTypeProtocolError]
			if status == 200 {
				o.errKey = "bad_answer"
			}
		}
		o.countWhole(row, n)
		return
	}
	for i, res := range a.Results {
		switch {
		case res.Ok && res.StartOffset != nil && res.EndOffset != nil:
			o.acked = append(o.acked, ackedBatch{key: plan[i].p.key, start: *res.StartOffset, end: *res.EndOffset})
			o.ackedRecords += *res.EndOffset - *res.StartOffset + 1
		case !res.Ok && res.ErrorType != "" && batchOutcome(res.ErrorType).kind == kindDefinite:
			o.failedBatches++
		default:
			o.unknownBatches++
		}
	}
}

// countWhole counts every batch of a request by one outcome: failed when
// definite (nothing was written), else unknown.
func (o *produceOutcome) countWhole(row outcome, n int64) {
	if row.kind == kindDefinite {
		o.failedBatches = n
	} else {
		o.unknownRequest, o.unknownBatches = true, n
	}
}

func (h *hammer) runClosed(ctx context.Context, end time.Time) {
	var wg sync.WaitGroup
	for range h.cfg.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(end) {
				if !h.produceOnce(time.Time{}, false) {
					sleepCtx(ctx, 10*time.Millisecond) // no owner left: do not spin
				}
			}
		}()
	}
	wg.Wait()
}

// runOpen starts request i at start + i*interval. A request that is due while
// -max-inflight are in flight is not sent (errors.backlog): the schedule never
// waits for completions. A scheduler that wakes late sends what is due at once;
// schedule_lag_ms reports how late requests started.
func (h *hammer) runOpen(ctx context.Context, start, end time.Time) {
	interval := float64(time.Second) * float64(h.cfg.recordsPerRequest) / h.cfg.rate
	slots := make(chan struct{}, h.cfg.maxInflight)
	var wg sync.WaitGroup
	for i := 0; ; i++ {
		due := start.Add(time.Duration(float64(i) * interval))
		if !due.Before(end) {
			break
		}
		if wait := time.Until(due); wait > 0 && !sleepCtx(ctx, wait) {
			break
		}
		select {
		case slots <- struct{}{}:
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.produceOnce(due, true)
				<-slots
			}()
		default:
			h.rec.produceNotSent("backlog", time.Since(due), true)
		}
	}
	wg.Wait()
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// -- consume

type follow struct {
	p       *partition
	next    int64
	probed  bool // consume-from end: the high watermark is known
	retryAt time.Time
}

type consumeRecord struct {
	Offset int64           `json:"offset"`
	Value  json.RawMessage `json:"value"`
}

type consumeResult struct {
	Ok              bool            `json:"ok"`
	HighWatermark   *int64          `json:"high_watermark"`
	NextFetchOffset int64           `json:"next_fetch_offset"`
	Records         []consumeRecord `json:"records"`
	ErrorCode       string          `json:"error_code"`
	// A binary answer's records: payloads[k] is at offset firstOffset+k.
	firstOffset int64
	payloads    [][]byte
}

// offsets and payloads of the records, from either answer format: a JSON
// string value without its opening quote (the timestamp header is plain ASCII,
// so its bytes are the payload's), anything else as it is (not ours then).
func (r *consumeResult) records() ([]int64, [][]byte) {
	if r.payloads != nil {
		offs := make([]int64, len(r.payloads))
		for k := range offs {
			offs[k] = r.firstOffset + int64(k)
		}
		return offs, r.payloads
	}
	offs, vals := make([]int64, len(r.Records)), make([][]byte, len(r.Records))
	for k, rec := range r.Records {
		offs[k], vals[k] = rec.Offset, rec.Value
		if len(rec.Value) > 0 && rec.Value[0] == '"' {
			vals[k] = rec.Value[1:]
		}
	}
	return offs, vals
}

type consumeAnswer struct {
	Results      []consumeResult `json:"results"`
	PayloadBytes int64           `json:"payload_bytes"`
	ErrorType    string          `json:"error_type"`
}

// consumer follows its partitions until ctx ends or, once producing stopped
// (targets set), every partition is read past its highest acknowledged offset.
func (h *hammer) consumer(ctx context.Context, follows []*follow, targets <-chan map[string]int64) {
	var target map[string]int64
	for ctx.Err() == nil {
		select {
		case target = <-targets:
		default:
		}
		if target != nil && caughtUp(follows, target) {
			return
		}
		if sent, wake := h.consumeRound(ctx, follows, false); !sent {
			sleepCtx(ctx, time.Until(wake))
		}
	}
}

// consumeRound sends one /consume per broker for the partitions that are due
// (a probe for those whose start is not known yet; only those with probesOnly)
// and waits for the answers. When none is due it returns false and when one will be.
func (h *hammer) consumeRound(ctx context.Context, follows []*follow, probesOnly bool) (bool, time.Time) {
	type groupKey struct {
		b     *broker
		probe bool
	}
	groups := map[groupKey][]*follow{}
	now := time.Now()
	wake := now.Add(time.Second)
	for _, f := range follows {
		if probesOnly && f.probed {
			continue
		}
		if f.retryAt.After(now) {
			wake = minTime(wake, f.retryAt)
			continue
		}
		b := h.router.pick(f.p.readOwners, &f.p.rrRead)
		if b == nil {
			h.rec.consume(&consumeOutcome{errKeys: []string{"no_owner"}})
			f.retryAt = now.Add(h.cfg.downBackoff / 4)
			wake = minTime(wake, f.retryAt)
			continue
		}
		k := groupKey{b, !f.probed}
		groups[k] = append(groups[k], f)
	}
	var wg sync.WaitGroup
	for k, fs := range groups {
		wg.Go(func() { h.consumeOnce(ctx, k.b, k.probe, fs) })
	}
	wg.Wait()
	return len(groups) > 0, wake
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func allProbed(follows []*follow) bool {
	for _, f := range follows {
		if !f.probed {
			return false
		}
	}
	return true
}

func caughtUp(follows []*follow, target map[string]int64) bool {
	for _, f := range follows {
		if end, ok := target[f.p.key]; ok && f.next <= end {
			return false
		}
	}
	return true
}

// consumeOnce sends one /consume for fs (all routed to b). A probe asks for
// the high watermark only: far past the end with max_wait_ms 0, which answers
// at once with no records and the high watermark read from Oxia (a tail-cache
// miss), and starts each partition past it.
func (h *hammer) consumeOnce(ctx context.Context, b *broker, probe bool, fs []*follow) {
	buf := append(make([]byte, 0, 64+len(fs)*80), `{"topic_partitions":[`...)
	for i, f := range fs {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendPartition(buf, f.p)
		buf = append(buf, `,"fetch_offset":`...)
		if probe {
			buf = strconv.AppendInt(buf, probeOffset, 10)
			buf = append(buf, '}')
		} else {
			buf = strconv.AppendInt(buf, f.next, 10)
			buf = append(buf, '}')
		}
	}
	wait := h.cfg.maxWaitMs
	if probe {
		wait = 0
	}
	buf = append(buf, `],"max_wait_ms":`...)
	buf = append(strconv.AppendInt(buf, int64(wait), 10), '}')

	reqCtx, cancel := context.WithTimeout(ctx, h.cfg.timeout+time.Duration(wait)*time.Millisecond)
	defer cancel()
	start := time.Now()
	b.inflight.Add(1)
	accept := ""
	if h.cfg.consumeBody == "binary" {
		accept = consumeBinaryType
	}
	status, doc, reason, err := h.post(reqCtx, b.consumeURL, buf, "application/json", accept)
	b.inflight.Add(-1)
	if err != nil && ctx.Err() != nil {
		return // the run ended under a waiting consume: not an error
	}
	o := &consumeOutcome{sent: true, status: status, latency: time.Since(start)}
	defer h.rec.consume(o)
	if err != nil {
		o.errKeys = append(o.errKeys, reason)
		h.router.markDown(b, remapReason(reason))
		return
	}
	var a consumeAnswer
	var bad error
	if status == 200 && accept != "" {
		bad = parseBinaryConsume(doc, &a)
	} else {
		bad = json.Unmarshal(doc, &a)
	}
	if bad != nil || (status == 200 && len(a.Results) != len(fs)) {
		o.errKeys = append(o.errKeys, "bad_answer")
		return
	}
	if status != 200 {
		if answerOutcome(status, a.ErrorType).stopping {
			o.errKeys = append(o.errKeys, "shutting_down")
			h.router.markDown(b, "http_503")
		} else if status >= 500 {
			o.errKeys = append(o.errKeys, "http_5xx")
		} else {
			o.errKeys = append(o.errKeys, "http_4xx")
		}
		return
	}
	now := time.Now()
	for i, res := range a.Results {
		f := fs[i]
		if !res.Ok {
			if res.ErrorCode != errorCodeUnknownTopicOrPartition { // not written yet: not an error
				o.errKeys = append(o.errKeys, strings.ToLower(res.ErrorCode))
			}
			f.retryAt = now.Add(notReadyRetry)
			if probe && res.ErrorCode == errorCodeUnknownTopicOrPartition {
				f.probed, f.next = true, 1 // never written: everything in it is this run's
			}
			continue
		}
		if probe {
			f.probed = true
			f.next = 1
			if res.HighWatermark != nil {
				f.next = *res.HighWatermark + 1
			}
			continue
		}
		offsets, payloads := res.records()
		for j, off := range offsets {
			if off != f.next+int64(j) {
				o.errKeys = append(o.errKeys, "offset_gap")
				break
			}
		}
		for _, p := range payloads {
			if sent, ok := sendTime(p); ok {
				o.e2e = append(o.e2e, now.Sub(sent))
			} else {
				o.errKeys = append(o.errKeys, "foreign_record")
			}
		}
		o.records += int64(len(payloads))
		f.next = max(res.NextFetchOffset, f.next)
	}
	if !probe {
		o.bytes = a.PayloadBytes
	}
}

// sendTime reads the timestamp header of a consumed payload.
func sendTime(payload []byte) (time.Time, bool) {
	if len(payload) < headerBytes || payload[tsDigits] != tsSeparator {
		return time.Time{}, false
	}
	ns, err := strconv.ParseUint(string(payload[:tsDigits]), 16, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, int64(ns)), true
}

const consumeBinaryType = "application/vnd.llog.consume.v2"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// parseBinaryConsume reads the binary consume answer (server/_protocol/consume_binary.py):
// "LLC1", version 2, flags 0, partition count, record count, payload bytes, waited
// ms, then per partition a u16-prefixed topic, a u32 partition, the i64 high
// watermark (-1: unknown), log start, next fetch offset and first offset, a
// u32-prefixed JSON error (empty when ok) and u32-prefixed whole RecordBatch v2
// batches (baseOffset = llog offset - 1); big-endian. Every length and CRC-32C is
// checked; records below first_offset (a fetch inside a batch) are skipped.
func parseBinaryConsume(doc []byte, a *consumeAnswer) error {
	be := binary.BigEndian
	if len(doc) < 28 || string(doc[:4]) != "LLC1" || be.Uint16(doc[4:]) != 2 || be.Uint16(doc[6:]) != 0 {
		return errors.New("not a binary consume answer (LLC1, version 2)")
	}
	count := int(be.Uint32(doc[8:]))
	a.PayloadBytes = int64(be.Uint64(doc[16:]))
	pos := 28
	for i := 0; i < count; i++ {
		if pos+2 > len(doc) {
			return fmt.Errorf("partition %d: truncated", i)
		}
		pos += 2 + int(be.Uint16(doc[pos:]))
		if pos+44 > len(doc) {
			return fmt.Errorf("partition %d: truncated", i)
		}
		res := consumeResult{Ok: true, NextFetchOffset: int64(be.Uint64(doc[pos+20:])), firstOffset: int64(be.Uint64(doc[pos+28:]))}
		if hw := int64(be.Uint64(doc[pos+4:])); hw >= 0 {
			res.HighWatermark = &hw
		}
		elen := int(be.Uint32(doc[pos+36:]))
		pos += 40
		if elen > 0 {
			var e struct {
				ErrorCode string `json:"error_code"`
			}
			if pos+elen > len(doc) || json.Unmarshal(doc[pos:pos+elen], &e) != nil {
				return fmt.Errorf("partition %d: bad error", i)
			}
			res.Ok, res.ErrorCode = false, e.ErrorCode
			pos += elen
		}
		if pos+4 > len(doc) {
			return fmt.Errorf("partition %d: truncated", i)
		}
		end := pos + 4 + int(be.Uint32(doc[pos:]))
		if end > len(doc) {
			return fmt.Errorf("partition %d: batches run past the answer", i)
		}
		for p := pos + 4; p < end; {
			next, err := readBatch(doc[p:end], res.firstOffset, &res.payloads)
			if err != nil {
				return fmt.Errorf("partition %d: %v", i, err)
			}
			p += next
		}
		a.Results = append(a.Results, res)
		pos = end
	}
	if pos != len(doc) {
		return errors.New("trailing bytes after the last partition")
	}
	return nil
}

// readBatch appends the values of one uncompressed RecordBatch v2 at the start of
// buf whose llog offsets are at least first, and returns the batch's length.
func readBatch(buf []byte, first int64, out *[][]byte) (int, error) {
	be := binary.BigEndian
	if len(buf) < 61 || buf[16] != 2 {
		return 0, errors.New("bad batch header")
	}
	size := 12 + int(int32(be.Uint32(buf[8:])))
	if size < 61 || size > len(buf) || crc32.Checksum(buf[21:size], castagnoli) != be.Uint32(buf[17:]) {
		return 0, errors.New("batch length or CRC-32C mismatch")
	}
	if be.Uint16(buf[21:])&0x07 != 0 {
		return 0, errors.New("compressed batch (the hammer writes none)")
	}
	base := int64(be.Uint64(buf[0:])) + 1
	n := int(int32(be.Uint32(buf[57:])))
	recs := buf[61:size]
	for k := 0; k < n; k++ {
		length, w := binary.Varint(recs)
		if w <= 0 || length < 0 || int(length) > len(recs)-w {
			return 0, fmt.Errorf("record %d runs past its batch", k)
		}
		rec := recs[w : w+int(length)]
		recs = recs[w+int(length):]
		value, err := recordValue(rec)
		if err != nil {
			return 0, fmt.Errorf("record %d: %v", k, err)
		}
		if base+int64(k) >= first {
			*out = append(*out, value)
		}
	}
	if len(recs) != 0 {
		return 0, errors.New("trailing bytes in a batch")
	}
	return size, nil
}

// recordValue is the value of one record (attributes, timestamp and offset deltas, key, value, headers).
func recordValue(rec []byte) ([]byte, error) {
	p := 1                   // attributes
	for f := 0; f < 2; f++ { // timestampDelta, offsetDelta
		if _, w := binary.Varint(rec[min(p, len(rec)):]); w > 0 {
			p += w
		} else {
			return nil, errors.New("bad varint")
		}
	}
	var value []byte
	for f := 0; f < 2; f++ { // key, then value
		n, w := binary.Varint(rec[min(p, len(rec)):])
		if w <= 0 || int(n) > len(rec)-p-w {
			return nil, errors.New("a key or value runs past its record")
		}
		p += w
		if n > 0 {
			value = rec[p : p+int(n)]
			p += int(n)
		} else {
			value = nil
		}
	}
	return value, nil
}

// ------------------------------------------------------------------------- output

type produceJSON struct {
	Requests        int64            `json:"requests"`
	OkRequests      int64            `json:"ok_requests"`
	Records         *int64           `json:"records,omitempty"`
	Bytes           *int64           `json:"bytes,omitempty"`
	AckedRecords    *int64           `json:"acked_records,omitempty"`
	AckedBytes      *int64           `json:"acked_bytes,omitempty"`
	SentRecords     int64            `json:"sent_records"`
	SentBytes       int64            `json:"sent_bytes"`
	UnknownRequests int64            `json:"unknown_requests"`
	UnknownBatches  int64            `json:"unknown_batches"`
	FailedBatches   int64            `json:"failed_batches"`
	Status          map[string]int64 `json:"status"`
	Errors          map[string]int64 `json:"errors"`
	LatencyMs       latencyJSON      `json:"latency_ms"`
	ScheduleLagMs   *latencyJSON     `json:"schedule_lag_ms,omitempty"`
}

type consumeJSON struct {
	Requests     int64            `json:"requests"`
	OkRequests   int64            `json:"ok_requests"`
	Records      int64            `json:"records"`
	Bytes        int64            `json:"bytes"`
	Status       map[string]int64 `json:"status"`
	Errors       map[string]int64 `json:"errors"`
	LatencyMs    latencyJSON      `json:"latency_ms"`
	E2eLatencyMs latencyJSON      `json:"e2e_latency_ms"`
}

func (h *hammer) produceJSON(s *sideStats, summary bool) produceJSON {
	out := produceJSON{Requests: s.requests, OkRequests: s.okRequests, SentRecords: s.sentRecords, SentBytes: s.sentBytes,
		UnknownRequests: s.unknownRequests, UnknownBatches: s.unknownBatches, FailedBatches: s.failedBatches,
		Status: s.status, Errors: s.errors, LatencyMs: s.latency.json()}
	records, bytes := s.records, s.bytes
	if summary {
		out.AckedRecords, out.AckedBytes = &records, &bytes
	} else {
		out.Records, out.Bytes = &records, &bytes
	}
	if h.cfg.mode == "open" {
		lag := s.lag.json()
		out.ScheduleLagMs = &lag
	}
	return out
}

func consumeJSONOf(s *sideStats) consumeJSON {
	return consumeJSON{Requests: s.requests, OkRequests: s.okRequests, Records: s.records, Bytes: s.bytes, Status: s.status,
		Errors: s.errors, LatencyMs: s.latency.json(), E2eLatencyMs: s.e2e.json()}
}

type windowJSON struct {
	WindowStartMs int64       `json:"window_start_ms"`
	WindowEndMs   int64       `json:"window_end_ms"`
	Produce       produceJSON `json:"produce"`
	Consume       consumeJSON `json:"consume"`
	Remaps        int64       `json:"remaps"`
}

func (h *hammer) writeWindow(w *windowStats, end time.Time) error {
	line, _ := json.Marshal(windowJSON{WindowStartMs: w.start.UnixMilli(), WindowEndMs: end.UnixMilli(),
		Produce: h.produceJSON(w.produce, false), Consume: consumeJSONOf(w.consume), Remaps: w.remaps})
	h.windowFile.Write(line)
	h.windowFile.WriteByte('\n')
	h.windowN++
	secs := end.Sub(w.start).Seconds()
	p, c := w.produce, w.consume
	fmt.Fprintf(os.Stderr, "[hammer] window %d (%.1fs): produce %.0f req/s %.1f MB/s acked, p50 %.1f p99 %.1f ms, errors %d",
		h.windowN, secs, float64(p.requests)/secs, float64(p.bytes)/secs/1e6, ms(p.latency.quantile(0.5)),
		ms(p.latency.quantile(0.99)), sum(p.errors))
	if h.cfg.consumers > 0 {
		fmt.Fprintf(os.Stderr, " | consume %.0f rec/s, e2e p50 %.1f p99 %.1f ms, errors %d", float64(c.records)/secs,
			ms(c.e2e.quantile(0.5)), ms(c.e2e.quantile(0.99)), sum(c.errors))
	}
	fmt.Fprintf(os.Stderr, " | remaps %d\n", w.remaps)
	return h.windowFile.Flush()
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

type intentJSON struct {
	Mode                 string   `json:"mode"`
	RateRecordsPerS      *float64 `json:"rate_records_per_s"`
	Concurrency          *int     `json:"concurrency"`
	MaxInflight          *int     `json:"max_inflight"`
	DurationS            float64  `json:"duration_s"`
	RecordBytes          int      `json:"record_bytes"`
	RecordsPerRequest    int      `json:"records_per_request"`
	PartitionsPerRequest int      `json:"partitions_per_request"`
	Partitions           int      `json:"partitions"`
	Topics               []string `json:"topics"`
	Brokers              []string `json:"brokers"`
	Selection            string   `json:"selection"`
	Consumers            int      `json:"consumers"`
	ConsumeFrom          string   `json:"consume_from"`
	MaxWaitMs            int      `json:"max_wait_ms"`
	WindowS              float64  `json:"window_s"`
	TimeoutS             float64  `json:"timeout_s"`
	DownBackoffS         float64  `json:"down_backoff_s"`
	Seed                 int64    `json:"seed"`
	Manifest             string   `json:"manifest"`
}

type clientJSON struct {
	CPUUserS   float64 `json:"cpu_user_s"`
	CPUSystemS float64 `json:"cpu_system_s"`
	MaxRSSB    int64   `json:"max_rss_bytes"`
	GoVersion  string  `json:"go_version"`
	GOMAXPROCS int     `json:"gomaxprocs"`
}

type summaryJSON struct {
	Intent          intentJSON            `json:"intent"`
	StartedAtMs     int64                 `json:"started_at_ms"`
	LoadStartedAtMs int64                 `json:"load_started_at_ms"`
	LoadEndedAtMs   int64                 `json:"load_ended_at_ms"`
	EndedAtMs       int64                 `json:"ended_at_ms"`
	Produce         produceJSON           `json:"produce"`
	Consume         consumeJSON           `json:"consume"`
	Remaps          int64                 `json:"remaps"`
	Client          clientJSON            `json:"client"`
	Acked           map[string][][2]int64 `json:"acked"`
}

func (h *hammer) intent() intentJSON {
	in := intentJSON{Mode: h.cfg.mode, DurationS: h.cfg.duration.Seconds(), RecordBytes: h.cfg.recordBytes,
		RecordsPerRequest: h.cfg.recordsPerRequest, PartitionsPerRequest: h.cfg.partitionsPerRequest,
		Partitions: len(h.router.parts), Selection: h.cfg.selection, Consumers: h.cfg.consumers,
		ConsumeFrom: h.cfg.consumeFrom, MaxWaitMs: h.cfg.maxWaitMs, WindowS: h.cfg.window.Seconds(),
		TimeoutS: h.cfg.timeout.Seconds(), DownBackoffS: h.cfg.downBackoff.Seconds(), Seed: h.cfg.seed,
		Manifest: h.cfg.manifestPath, Topics: []string{}, Brokers: []string{}}
	if h.cfg.mode == "open" {
		in.RateRecordsPerS, in.MaxInflight = &h.cfg.rate, &h.cfg.maxInflight
	} else {
		in.Concurrency = &h.cfg.concurrency
	}
	seen := map[string]bool{}
	for _, p := range h.router.parts {
		if !seen[p.topic] {
			seen[p.topic] = true
			in.Topics = append(in.Topics, p.topic)
		}
	}
	for _, b := range h.brokers {
		in.Brokers = append(in.Brokers, b.id)
	}
	return in
}

func cpuUsage() (user, system float64, maxRSS int64) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0, 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime), tv(ru.Stime), int64(ru.Maxrss) * 1024
}

func writeJSONFile(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ------------------------------------------------------------------------------ run

func (h *hammer) run(ctx context.Context) error {
	windowsF, err := os.Create(filepath.Join(h.cfg.outDir, "client-30s.jsonl"))
	if err != nil {
		return err
	}
	defer windowsF.Close()
	eventsF, err := os.Create(filepath.Join(h.cfg.outDir, "remap-events.jsonl"))
	if err != nil {
		return err
	}
	defer eventsF.Close()
	h.windowFile = bufio.NewWriter(windowsF)

	started := time.Now()
	h.rec = &recorder{cur: newWindow(started), total: newWindow(started), acked: map[string][][2]int64{}, ackedEnd: map[string]int64{}}
	probeCtx, stopProbes := context.WithCancel(context.Background())
	defer stopProbes()
	h.router.ctx, h.router.events, h.router.onRemap = probeCtx, bufio.NewWriter(eventsF), h.rec.remap

	// Windows: one line per tick, the last (partial) one at the end.
	windowsDone := make(chan struct{})
	windowErr := make(chan error, 1)
	go func() {
		ticker := time.NewTicker(h.cfg.window)
		defer ticker.Stop()
		var firstErr error
		for {
			select {
			case now := <-ticker.C:
				w := h.rec.rotate(now)
				if err := h.writeWindow(w, now); err != nil && firstErr == nil {
					firstErr = err
				}
			case <-windowsDone:
				windowErr <- firstErr
				return
			}
		}
	}()

	// Consumers: consumer i follows partitions i, i+N, ... With -consume-from end
	// every partition's high watermark is asked for before the load starts (a
	// partition whose probe fails is probed again later, and starts later).
	consumeCtx, stopConsumers := context.WithCancel(context.Background())
	defer stopConsumers()
	follows := make([][]*follow, h.cfg.consumers)
	var probes sync.WaitGroup
	for i := range h.cfg.consumers {
		for j := i; j < len(h.router.parts); j += h.cfg.consumers {
			follows[i] = append(follows[i], &follow{p: h.router.parts[j], next: 1, probed: h.cfg.consumeFrom == "start"})
		}
		if h.cfg.consumeFrom == "end" {
			probes.Go(func() {
				// A probe that failed on a broker now marked down goes to another owner.
				for range 3 {
					if sent, _ := h.consumeRound(consumeCtx, follows[i], true); !sent || allProbed(follows[i]) {
						return
					}
				}
			})
		}
	}
	probes.Wait()
	var consumers sync.WaitGroup
	targetChans := make([]chan map[string]int64, h.cfg.consumers)
	for i := range h.cfg.consumers {
		targetChans[i] = make(chan map[string]int64, 1)
		if len(follows[i]) > 0 {
			consumers.Go(func() { h.consumer(consumeCtx, follows[i], targetChans[i]) })
		}
	}

	fmt.Fprintf(os.Stderr, "[hammer] %s loop for %s: %d partitions on %d brokers, %d records x %d B per request, %d consumers\n",
		h.cfg.mode, h.cfg.duration, len(h.router.parts), len(h.brokers), h.cfg.recordsPerRequest, h.cfg.recordBytes, h.cfg.consumers)
	loadStarted := time.Now()
	end := loadStarted.Add(h.cfg.duration)
	if h.cfg.mode == "open" {
		h.runOpen(ctx, loadStarted, end)
	} else {
		h.runClosed(ctx, end)
	}
	loadEnded := time.Now()

	// Drain: consumers read up to the highest acknowledged offsets, for at most -drain.
	targets := h.rec.ackedEnds()
	for _, ch := range targetChans {
		ch <- targets
	}
	drained := make(chan struct{})
	go func() { consumers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(h.cfg.drain):
		fmt.Fprintf(os.Stderr, "[hammer] consumers did not catch up within -drain %s; stopping them\n", h.cfg.drain)
	case <-ctx.Done():
	}
	stopConsumers()
	consumers.Wait()
	stopProbes()

	close(windowsDone)
	werr := <-windowErr
	endedAt := time.Now()
	if last := h.rec.rotate(endedAt); endedAt.Sub(last.start) > 0 {
		if err := h.writeWindow(last, endedAt); err != nil && werr == nil {
			werr = err
		}
	}
	h.router.mu.Lock()
	eventsErr := h.router.events.Flush()
	h.router.mu.Unlock()

	total := h.rec.total
	user, system, rss := cpuUsage()
	summary := summaryJSON{
		Intent: h.intent(), StartedAtMs: started.UnixMilli(), LoadStartedAtMs: loadStarted.UnixMilli(),
		LoadEndedAtMs: loadEnded.UnixMilli(), EndedAtMs: endedAt.UnixMilli(),
		Produce: h.produceJSON(total.produce, true), Consume: consumeJSONOf(total.consume), Remaps: total.remaps,
		Client: clientJSON{CPUUserS: user, CPUSystemS: system, MaxRSSB: rss, GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0)},
		Acked:  h.rec.mergedAcked(),
	}
	if err := writeJSONFile(filepath.Join(h.cfg.outDir, "client-summary.json"), summary); err != nil {
		return err
	}
	h.printSummary(total, loadEnded.Sub(loadStarted), user+system)
	return errors.Join(werr, eventsErr)
}

func (h *hammer) printSummary(t *windowStats, load time.Duration, cpu float64) {
	p, c := t.produce, t.consume
	secs := load.Seconds()
	fmt.Fprintf(os.Stderr, "[hammer] produce: %d requests (%.0f/s), %d acked records (%.1f MB/s), latency p50 %.1f p99 %.1f max %.1f ms\n",
		p.requests, float64(p.requests)/secs, p.records, float64(p.bytes)/secs/1e6, ms(p.latency.quantile(0.5)),
		ms(p.latency.quantile(0.99)), ms(p.latency.max))
	fmt.Fprintf(os.Stderr, "[hammer]   status %v, errors %v, unknown batches %d, failed batches %d\n",
		p.status, p.errors, p.unknownBatches, p.failedBatches)
	if h.cfg.consumers > 0 {
		fmt.Fprintf(os.Stderr, "[hammer] consume: %d requests, %d records, e2e p50 %.1f p99 %.1f max %.1f ms, errors %v\n",
			c.requests, c.records, ms(c.e2e.quantile(0.5)), ms(c.e2e.quantile(0.99)), ms(c.e2e.max), c.errors)
	}
	fmt.Fprintf(os.Stderr, "[hammer] remaps %d; client CPU %.2f s (%.0f%% of one core)\n", t.remaps, cpu, 100*cpu/secs)
}

func run(args []string) int {
	cfg, err := parseFlags(args, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case err != nil:
		fmt.Fprintf(os.Stderr, "http_hammer: %v\n", err)
		return 2
	}
	m, err := loadManifest(cfg.manifestPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "http_hammer: %v\n", err)
		return 2
	}
	h, err := newHammer(cfg, m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "http_hammer: %v\n", err)
		return 2
	}
	if err := os.MkdirAll(cfg.outDir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "http_hammer: cannot create -out: %v\n", err)
		return 1
	}
	// SIGINT/SIGTERM end the load early; the artifacts are still written.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := h.run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "http_hammer: writing the results: %v\n", err)
		return 1
	}
	return 0
}

func main() { os.Exit(run(os.Args[1:])) }
