package metrics

import "github.com/prometheus/client_golang/prometheus"

// TenantCounts is one tenant's counts, as the scheduler keeps them: now
// waiting and in flight, and since it was first tracked shed, served and
// tokens of usage.
type TenantCounts struct {
	Tenant   string
	Waiting  int
	InFlight int
	Shed     int64
	Served   int64
	Tokens   int64
}

// tenantCollector reads the tenants' counts on each scrape. Their number is
// bounded by TENANT_MAX, so the tenant label is too; a tenant that loses
// its place to another drops out of the series (and its counters restart
// if it comes back).
type tenantCollector struct {
	read                                  func() []TenantCounts
	waiting, inFlight, shed, served, toks *prometheus.Desc
}

func newTenantCollector(read func() []TenantCounts) *tenantCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"tenant"}, nil)
	}
	return &tenantCollector{read: read,
		waiting:  d("sluice_tenant_waiting_requests", "Requests of the tenant waiting now, in open windows or for a slot."),
		inFlight: d("sluice_tenant_in_flight_requests", "Requests of the tenant holding a gate slot now."),
		shed:     d("sluice_tenant_shed_requests_total", "Requests of the tenant answered 429 at once because it had TENANT_MAX_WAITING waiting."),
		served:   d("sluice_tenant_served_requests_total", "Requests of the tenant that held a gate slot and gave it back."),
		toks:     d("sluice_tenant_tokens_total", "Tokens reported in the usage of the tenant's answers (input and output)."),
	}
}

func (c *tenantCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.waiting, c.inFlight, c.shed, c.served, c.toks} {
		ch <- d
	}
}

func (c *tenantCollector) Collect(ch chan<- prometheus.Metric) {
	if c.read == nil {
		return
	}
	for _, t := range c.read() {
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(t.Waiting), t.Tenant)
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(t.InFlight), t.Tenant)
		ch <- prometheus.MustNewConstMetric(c.shed, prometheus.CounterValue, float64(t.Shed), t.Tenant)
		ch <- prometheus.MustNewConstMetric(c.served, prometheus.CounterValue, float64(t.Served), t.Tenant)
		ch <- prometheus.MustNewConstMetric(c.toks, prometheus.CounterValue, float64(t.Tokens), t.Tenant)
	}
}
