// Command kafkaclients runs Go's most used Kafka clients, franz-go, Sarama and
// segmentio/kafka-go, against a Kafka listener: an acks=all producer (idempotent
// where the client has one) with every compression,
// a reader of every partition from the start, a consumer group that commits,
// and a second member of that group that resumes from the commit.
//
//	kafkaclients franz|sarama|segmentio BOOTSTRAP TOPIC GROUP RECORDS
//
// It prints one JSON object: what each step saw (values read, in any order).
// The test (tests/integration/test_kafka_go_clients.py) checks it; this
// program only reports, and exits 1 with the error when a client fails.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Report is what one run saw.
type Report struct {
	Client      string   `json:"client"`
	Produced    []string `json:"produced"`
	Assigned    []string `json:"assigned"`
	Group       []string `json:"group"`
	Resumed     []string `json:"resumed"`
	ProducedTwo []string `json:"produced_two"`
	// Admin is what franz-go's admin client (kadm) reports at the end: the group's lag, the
	// topic's end offsets summed, and its partitions' sizes summed over every broker's log dirs.
	Admin *Admin `json:"admin,omitempty"`
}

// Admin is kadm's view of the topic and the group once everything was read.
type Admin struct {
	GroupState    string `json:"group_state"`
	Lag           int64  `json:"lag"`
	EndOffsets    int64  `json:"end_offsets"`
	LogDirBytes   int64  `json:"log_dir_bytes"`
	LogDirEntries int    `json:"log_dir_partitions"`
}

var codecs = []string{"none", "gzip", "snappy", "lz4", "zstd"}

const readTimeout = 60 * time.Second

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: kafkaclients franz|sarama|segmentio BOOTSTRAP TOPIC GROUP RECORDS")
		os.Exit(2)
	}
	client, bootstrap, topic, group := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	n, err := strconv.Atoi(os.Args[5])
	if err != nil || n < len(codecs) {
		fmt.Fprintf(os.Stderr, "RECORDS must be an integer >= %d, got %q\n", len(codecs), os.Args[5])
		os.Exit(2)
	}
	var run func(ctx context.Context, bootstrap, topic, group string, n int) (*Report, error)
	switch client {
	case "franz":
		run = runFranz
	case "sarama":
		run = runSarama
	case "segmentio":
		run = runSegmentio
	default:
		fmt.Fprintf(os.Stderr, "unknown client %q: franz, sarama or segmentio\n", client)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	report, err := run(ctx, bootstrap, topic, group, n)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", client, err)
		os.Exit(1)
	}
	report.Client = client
	if err := json.NewEncoder(os.Stdout).Encode(report); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// values are the records' values of one produce round: round r, record i.
func values(round string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", round, i)
	}
	return out
}
