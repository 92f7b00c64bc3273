module github.com/troy-audit/troy/tools

go 1.26.8

require github.com/troy-audit/troy v0.0.0

require github.com/ThreeDotsLabs/watermill-nats/v2 v2.1.3 // indirect

replace github.com/troy-audit/troy => ../
