package llm

import (
	"strings"
	"sync"
)

// Price is USD per million tokens.
type Price struct {
	Input  float64 `json:"input"`
	Output float64 `json:"output"`
}

// DefaultPrices are list prices per million tokens (USD) of common models;
// override them with your own table (--llm-prices FILE).
var DefaultPrices = map[string]Price{
	"gpt-4o-mini":  {Input: 0.15, Output: 0.60},
	"gpt-4o":       {Input: 2.50, Output: 10.00},
	"gpt-4.1":      {Input: 2.00, Output: 8.00},
	"gpt-4.1-mini": {Input: 0.40, Output: 1.60},
	"gpt-4.1-nano": {Input: 0.10, Output: 0.40},
	"o4-mini":      {Input: 1.10, Output: 4.40},
	"o3":           {Input: 2.00, Output: 8.00},
}

// Pricing turns token counts into cost. An unknown model costs zero, and the
// first time it is seen warn is called.
type Pricing struct {
	Prices map[string]Price
	Warn   func(model string)

	once sync.Map // model -> warned
}

// Cost of one call.
func (p *Pricing) Cost(model string, prompt, completion int) float64 {
	price, ok := p.Prices[model]
	if !ok { // dated variants (gpt-4o-mini-2024-07-18): the longest name that prefixes it
		best := ""
		for name, pr := range p.Prices {
			if strings.HasPrefix(model, name+"-") && len(name) > len(best) {
				best, price, ok = name, pr, true
			}
		}
	}
	if !ok {
		if _, warned := p.once.LoadOrStore(model, true); !warned && p.Warn != nil {
			p.Warn(model)
		}
		return 0
	}
	return (float64(prompt)*price.Input + float64(completion)*price.Output) / 1e6
}
