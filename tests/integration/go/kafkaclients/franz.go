package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func franzCodec(name string) kgo.CompressionCodec {
	switch name {
	case "gzip":
		return kgo.GzipCompression()
	case "snappy":
		return kgo.SnappyCompression()
	case "lz4":
		return kgo.Lz4Compression()
	case "zstd":
		return kgo.ZstdCompression()
	}
	return kgo.NoCompression()
}

// franzProduce sends vals with franz-go's defaults (idempotent, acks=all), split over every codec.
func franzProduce(ctx context.Context, bootstrap, topic string, vals []string) error {
	per := (len(vals) + len(codecs) - 1) / len(codecs)
	for c, codec := range codecs {
		cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.DefaultProduceTopic(topic),
			kgo.ProducerBatchCompression(franzCodec(codec)), kgo.RequiredAcks(kgo.AllISRAcks()))
		if err != nil {
			return err
		}
		var records []*kgo.Record
		for i := c * per; i < len(vals) && i < (c+1)*per; i++ {
			records = append(records, &kgo.Record{Key: []byte(vals[i]), Value: []byte(vals[i])})
		}
		err = cl.ProduceSync(ctx, records...).FirstErr()
		cl.Close()
		if err != nil {
			return fmt.Errorf("produce (%s): %w", codec, err)
		}
	}
	return nil
}

// franzRead polls cl until want records arrived or readTimeout passed; commits them when commit.
func franzRead(ctx context.Context, cl *kgo.Client, want int, commit bool) ([]string, error) {
	var got []string
	deadline := time.Now().Add(readTimeout)
	for len(got) < want && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := cl.PollFetches(pctx)
		cancel()
		for _, e := range fetches.Errors() {
			if e.Err != context.DeadlineExceeded && !strings.Contains(e.Err.Error(), "context deadline") {
				return got, fmt.Errorf("fetch %s[%d]: %w", e.Topic, e.Partition, e.Err)
			}
		}
		fetches.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		if commit {
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				return got, fmt.Errorf("commit: %w", err)
			}
		}
	}
	return got, nil
}

func runFranz(ctx context.Context, bootstrap, topic, group string, n int) (*Report, error) {
	r := &Report{Produced: values("one", n)}
	if err := franzProduce(ctx, bootstrap, topic, r.Produced); err != nil {
		return nil, err
	}
	reader, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	r.Assigned, err = franzRead(ctx, reader, n, false)
	reader.Close()
	if err != nil {
		return nil, fmt.Errorf("read from the start: %w", err)
	}
	member := func() (*kgo.Client, error) {
		return kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	}
	first, err := member()
	if err != nil {
		return nil, err
	}
	r.Group, err = franzRead(ctx, first, n, true)
	first.Close() // leaves the group, its commits made
	if err != nil {
		return nil, fmt.Errorf("group: %w", err)
	}
	r.ProducedTwo = values("two", 10)
	if err := franzProduce(ctx, bootstrap, topic, r.ProducedTwo); err != nil {
		return nil, err
	}
	second, err := member()
	if err != nil {
		return nil, err
	}
	r.Resumed, err = franzRead(ctx, second, len(r.ProducedTwo), true)
	second.Close()
	if err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	r.Admin, err = franzAdmin(ctx, bootstrap, topic, group)
	return r, err
}

// franzAdmin asks through kadm what a Go operator's tool asks: lag, end offsets, log dirs.
func franzAdmin(ctx context.Context, bootstrap, topic, group string) (*Admin, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	out := &Admin{}
	lags, err := adm.Lag(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("lag: %w", err)
	}
	described := lags[group]
	if err := described.Error(); err != nil {
		return nil, fmt.Errorf("lag of %s: %w", group, err)
	}
	out.GroupState, out.Lag = described.State, described.Lag.Total()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("end offsets: %w", err)
	}
	ends.Each(func(o kadm.ListedOffset) { out.EndOffsets += o.Offset })
	dirs, err := adm.DescribeAllLogDirs(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("log dirs: %w", err)
	}
	for _, broker := range dirs {
		broker.EachPartition(func(p kadm.DescribedLogDirPartition) {
			if p.Topic == topic {
				out.LogDirBytes += p.Size
				out.LogDirEntries++
			}
		})
	}
	return out, nil
}
