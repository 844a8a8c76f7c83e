package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

func saramaConfig() *sarama.Config {
	cfg := sarama.NewConfig() // its default protocol version (2.1): older encodings than franz-go's
	cfg.ClientID = "llog-test-sarama"
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Idempotent = true
	cfg.Producer.Retry.Max = 10
	cfg.Net.MaxOpenRequests = 1 // what Sarama's idempotent producer requires
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Return.Errors = true
	return cfg
}

func saramaCodec(name string) sarama.CompressionCodec {
	switch name {
	case "gzip":
		return sarama.CompressionGZIP
	case "snappy":
		return sarama.CompressionSnappy
	case "lz4":
		return sarama.CompressionLZ4
	case "zstd":
		return sarama.CompressionZSTD
	}
	return sarama.CompressionNone
}

func saramaProduce(bootstrap, topic string, vals []string) error {
	per := (len(vals) + len(codecs) - 1) / len(codecs)
	for c, codec := range codecs {
		cfg := saramaConfig()
		cfg.Producer.Compression = saramaCodec(codec)
		p, err := sarama.NewSyncProducer([]string{bootstrap}, cfg)
		if err != nil {
			return err
		}
		var msgs []*sarama.ProducerMessage
		for i := c * per; i < len(vals) && i < (c+1)*per; i++ {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(vals[i]),
				Value: sarama.StringEncoder(vals[i])})
		}
		err = p.SendMessages(msgs)
		p.Close()
		if err != nil {
			return fmt.Errorf("produce (%s): %w", codec, err)
		}
	}
	return nil
}

// saramaAssigned reads every partition of topic from the oldest offset until want records arrived.
func saramaAssigned(bootstrap, topic string, want int) ([]string, error) {
	consumer, err := sarama.NewConsumer([]string{bootstrap}, saramaConfig())
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	partitions, err := consumer.Partitions(topic)
	if err != nil {
		return nil, err
	}
	out := make(chan string)
	errs := make(chan error, len(partitions))
	for _, p := range partitions {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, err
		}
		defer pc.Close()
		go func() {
			for {
				select {
				case m, ok := <-pc.Messages():
					if !ok {
						return
					}
					out <- string(m.Value)
				case e, ok := <-pc.Errors():
					if ok {
						errs <- e
					}
					return
				}
			}
		}()
	}
	var got []string
	deadline := time.After(readTimeout)
	for len(got) < want {
		select {
		case v := <-out:
			got = append(got, v)
		case e := <-errs:
			return got, e
		case <-deadline:
			return got, nil
		}
	}
	return got, nil
}

// groupHandler collects a group member's records and marks each for the commit.
type groupHandler struct {
	mu   sync.Mutex
	got  []string
	want int
	done chan struct{}
	once sync.Once
}

func (h *groupHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *groupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *groupHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		s.MarkMessage(m, "")
		s.Commit()
		h.mu.Lock()
		h.got = append(h.got, string(m.Value))
		if len(h.got) >= h.want {
			h.once.Do(func() { close(h.done) })
		}
		h.mu.Unlock()
	}
	return nil
}

// saramaGroup joins group until want records arrived (committing each), then leaves it.
func saramaGroup(ctx context.Context, bootstrap, topic, group string, want int) ([]string, error) {
	cg, err := sarama.NewConsumerGroup([]string{bootstrap}, group, saramaConfig())
	if err != nil {
		return nil, err
	}
	h := &groupHandler{want: want, done: make(chan struct{})}
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var consumeErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for cctx.Err() == nil {
			if err := cg.Consume(cctx, []string{topic}, h); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
				consumeErr = err
				return
			}
		}
	}()
	select {
	case <-h.done:
	case <-time.After(readTimeout):
	case err := <-cg.Errors():
		consumeErr = err
	}
	cancel()
	wg.Wait()
	if err := cg.Close(); err != nil && consumeErr == nil {
		consumeErr = err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got, consumeErr
}

func runSarama(ctx context.Context, bootstrap, topic, group string, n int) (*Report, error) {
	r := &Report{Produced: values("one", n)}
	if err := saramaProduce(bootstrap, topic, r.Produced); err != nil {
		return nil, err
	}
	var err error
	if r.Assigned, err = saramaAssigned(bootstrap, topic, n); err != nil {
		return nil, fmt.Errorf("read from the start: %w", err)
	}
	if r.Group, err = saramaGroup(ctx, bootstrap, topic, group, n); err != nil {
		return nil, fmt.Errorf("group: %w", err)
	}
	r.ProducedTwo = values("two", 10)
	if err := saramaProduce(bootstrap, topic, r.ProducedTwo); err != nil {
		return nil, err
	}
	if r.Resumed, err = saramaGroup(ctx, bootstrap, topic, group, len(r.ProducedTwo)); err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	return r, nil
}
