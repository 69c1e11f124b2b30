package bulk

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the bulk endpoint's collectors (docs/metrics.md). Register
// them with Service.Collectors.
type Metrics struct {
	submissions     *prometheus.CounterVec // outcome
	flushes         *prometheus.CounterVec // reason
	batches         prometheus.Counter
	createRefused   prometheus.Counter
	createLost      prometheus.Counter
	reconciled      *prometheus.CounterVec // outcome
	results         *prometheus.CounterVec // type
	webhooks        prometheus.Counter
	webhookFailures prometheus.Counter
	savings         prometheus.Counter
	commit          prometheus.Histogram
	groupSize       prometheus.Histogram
	inFlight        prometheus.GaugeFunc
}

func newMetrics(s *Service) *Metrics {
	return &Metrics{
		submissions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_bulk_submissions_total",
			Help: "Bulk submissions answered, by outcome: accepted (stored, 202), duplicate (an Idempotency-Key seen before), refused (4xx or 5xx)."}, []string{"outcome"}),
		flushes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_bulk_flushes_total",
			Help: "Bulk windows closed, by reason: size, bytes, age, flush."}, []string{"reason"}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_bulk_batches_created_total",
			Help: "Message Batches created upstream for bulk submissions."}),
		createRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_bulk_creates_refused_total",
			Help: "Batch creates the upstream refused (429 and 529 requeue the requests; other 4xx end them errored)."}),
		createLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_bulk_creates_lost_total",
			Help: "Batch creates whose answer was lost (a broken connection, a 5xx), reconciled by listing the key's batches."}),
		reconciled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_bulk_reconciled_total",
			Help: "Lost creates resolved, by outcome: adopted (the upstream batch was found), requeued (it was not upstream)."}, []string{"outcome"}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_bulk_results_total",
			Help: "Bulk results stored from upstream batches, by type: succeeded, errored, canceled, expired."}, []string{"type"}),
		webhooks: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_bulk_webhooks_delivered_total",
			Help: "Webhook deliveries answered 2xx."}),
		webhookFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_bulk_webhook_failures_total",
			Help: "Webhook delivery attempts that failed (each is retried with backoff, up to 20 attempts)."}),
		savings: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_bulk_savings_usd_total",
			Help: "What succeeded bulk results saved against the same requests at realtime list prices, in USD."}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_bulk_commit_seconds",
			Help: "Time of one group commit of bulk submissions.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		groupSize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_bulk_commit_group_size",
			Help: "Bulk submissions stored per commit.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		inFlight: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_bulk_batches_in_flight",
			Help: "Bulk batches being created or in progress upstream, as of the last poll."}, func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			return float64(s.inFlight)
		}),
	}
}

// Collectors returns the service's metrics, for the proxy's registry.
func (s *Service) Collectors() []prometheus.Collector {
	m := s.m
	return []prometheus.Collector{m.submissions, m.flushes, m.batches, m.createRefused, m.createLost, m.reconciled,
		m.results, m.webhooks, m.webhookFailures, m.savings, m.commit, m.groupSize, m.inFlight}
}
