package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
)

func segmentioCodec(name string) compress.Compression {
	switch name {
	case "gzip":
		return compress.Gzip
	case "snappy":
		return compress.Snappy
	case "lz4":
		return compress.Lz4
	case "zstd":
		return compress.Zstd
	}
	return compress.None
}

// segmentioProduce writes vals with acks=all, split over every codec (kafka-go has no
// idempotent producer).
func segmentioProduce(ctx context.Context, bootstrap, topic string, vals []string) error {
	per := (len(vals) + len(codecs) - 1) / len(codecs)
	for c, codec := range codecs {
		w := &kafka.Writer{Addr: kafka.TCP(bootstrap), Topic: topic, Balancer: &kafka.Hash{},
			RequiredAcks: kafka.RequireAll, Compression: segmentioCodec(codec), BatchTimeout: 10 * time.Millisecond}
		var msgs []kafka.Message
		for i := c * per; i < len(vals) && i < (c+1)*per; i++ {
			msgs = append(msgs, kafka.Message{Key: []byte(vals[i]), Value: []byte(vals[i])})
		}
		err := w.WriteMessages(ctx, msgs...)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("produce (%s): %w", codec, err)
		}
	}
	return nil
}

// segmentioRead reads with r until want records arrived or readTimeout passed; a group
// reader commits each record it read.
func segmentioRead(ctx context.Context, r *kafka.Reader, want int, commit bool) ([]string, error) {
	var got []string
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	for len(got) < want {
		m, err := r.FetchMessage(rctx)
		if errors.Is(err, context.DeadlineExceeded) {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		got = append(got, string(m.Value))
		if commit {
			if err := r.CommitMessages(ctx, m); err != nil {
				return got, fmt.Errorf("commit: %w", err)
			}
		}
	}
	return got, nil
}

func runSegmentio(ctx context.Context, bootstrap, topic, group string, n int) (*Report, error) {
	r := &Report{Produced: values("one", n)}
	if err := segmentioProduce(ctx, bootstrap, topic, r.Produced); err != nil {
		return nil, err
	}
	conn, err := kafka.DialContext(ctx, "tcp", bootstrap)
	if err != nil {
		return nil, err
	}
	partitions, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		return nil, fmt.Errorf("partitions: %w", err)
	}
	for _, p := range partitions { // one reader per partition, from its first offset to its last
		leader, err := kafka.DialLeader(ctx, "tcp", bootstrap, topic, p.ID)
		if err != nil {
			return nil, err
		}
		first, last, err := leader.ReadOffsets()
		leader.Close()
		if err != nil {
			return nil, fmt.Errorf("offsets of partition %d: %w", p.ID, err)
		}
		if last == first {
			continue
		}
		reader := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{bootstrap}, Topic: topic, Partition: p.ID,
			MaxWait: 200 * time.Millisecond})
		if err := reader.SetOffset(first); err != nil {
			return nil, err
		}
		got, err := segmentioRead(ctx, reader, int(last-first), false)
		reader.Close()
		if err != nil {
			return nil, fmt.Errorf("read partition %d: %w", p.ID, err)
		}
		r.Assigned = append(r.Assigned, got...)
	}
	member := func() *kafka.Reader {
		return kafka.NewReader(kafka.ReaderConfig{Brokers: []string{bootstrap}, GroupID: group, Topic: topic,
			StartOffset: kafka.FirstOffset, MaxWait: 200 * time.Millisecond})
	}
	first := member()
	r.Group, err = segmentioRead(ctx, first, n, true)
	first.Close()
	if err != nil {
		return nil, fmt.Errorf("group: %w", err)
	}
	r.ProducedTwo = values("two", 10)
	if err := segmentioProduce(ctx, bootstrap, topic, r.ProducedTwo); err != nil {
		return nil, err
	}
	second := member()
	r.Resumed, err = segmentioRead(ctx, second, len(r.ProducedTwo), true)
	second.Close()
	if err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	return r, nil
}
