package rabbitmq

import (
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
)

// Messages hold events in binary mode as Knative's RabbitMQ broker writes them: each
// attribute and extension is a header "ce-<name>" with a string value, datacontenttype
// is the message's content-type property, and the data is the body. Messages are
// persistent (delivery mode 2). Publish sends one message per subscription the event was
// routed to, with the subscription's name as its routing key (not one message with the
// others in a BCC header: RabbitMQ returns a mandatory message only when it reaches no
// queue at all, so a BCC copy whose queue is gone would be dropped unseen).
const (
	headerPrefix = "ce-"
	// maxHeaderName is AMQP's limit on a header (table key) name: a short string.
	maxHeaderName = 255
	// overhead approximates the bytes of a message beyond its headers' text and body
	// (frame headers, properties, table encoding).
	overhead = 256
)

// encode returns the publishing that stores e and its size (body and headers), or a
// refusal when a name cannot be written.
func encode(e *event.Event) (amqp.Publishing, int, error) {
	h := make(amqp.Table, len(e.Extensions)+8)
	size := overhead + len(e.Data) + len(e.DataContentType)
	add := func(name, v string) {
		h[headerPrefix+name] = v
		size += len(headerPrefix) + len(name) + len(v) + 5
	}
	for _, a := range [...][2]string{
		{event.AttrSpecVersion, e.SpecVersion}, {event.AttrID, e.ID}, {event.AttrSource, e.Source},
		{event.AttrType, e.Type}, {event.AttrDataSchema, e.DataSchema}, {event.AttrSubject, e.Subject},
		{event.AttrTime, e.Time},
	} {
		if a[1] != "" {
			add(a[0], a[1])
		}
	}
	for _, x := range e.Extensions {
		if len(headerPrefix)+len(x.Name) > maxHeaderName {
			return amqp.Publishing{}, 0, channel.Refuse(channel.ErrTooLarge,
				fmt.Sprintf("an extension name is %d bytes, over RabbitMQ's %d-byte header names", len(x.Name), maxHeaderName-len(headerPrefix)), nil)
		}
		add(x.Name, x.Value)
	}
	return amqp.Publishing{
		Headers:      h,
		ContentType:  e.DataContentType,
		DeliveryMode: amqp.Persistent,
		Body:         e.Data,
	}, size, nil
}

// decode returns the event a delivery holds. Header values that are not strings (another
// producer's) are read as their text; headers without the ce- prefix are ignored. Its
// data aliases d.Body.
func decode(d *amqp.Delivery) *event.Event {
	e := &event.Event{DataContentType: d.ContentType}
	for k, v := range d.Headers {
		name, ok := strings.CutPrefix(k, headerPrefix)
		if !ok {
			continue
		}
		var s string
		switch v := v.(type) {
		case string:
			s = v
		case []byte:
			s = string(v)
		default:
			s = fmt.Sprint(v)
		}
		e.Set(name, s)
	}
	if len(d.Body) > 0 {
		e.Data = d.Body
	}
	return e
}
