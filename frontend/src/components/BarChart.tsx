import { Content } from '@patternfly/react-core';
import { seriesColor } from '../lib/palette';
import './BarChart.css';

interface Group {
  label: string;
  values: Array<[string, number]>;
}

/** Horizontal grouped bars (plain HTML/CSS): one group per scenario, one bar per figure. */
export function BarChart({ groups, format }: { groups: Group[]; format: (v: number) => string }) {
  const max = Math.max(1e-9, ...groups.flatMap((g) => g.values.map(([, v]) => v)));
  return (
    <div className="sz-bars" role="img" aria-label={groups.map((g) => g.label).join('; ')}>
      {groups.map((g) => (
        <figure key={g.label} className="sz-bars__group">
          <Content component="small">
            <figcaption>{g.label}</figcaption>
          </Content>
          {g.values.map(([name, value], i) => (
            <div key={name} className="sz-bars__row">
              <span className="sz-bars__name">{name}</span>
              <span className="sz-bars__track">
                <span className="sz-bars__bar" style={{ width: `${(value / max) * 100}%`, background: seriesColor(i) }} />
              </span>
              <span className="sz-bars__value">{format(value)}</span>
            </div>
          ))}
        </figure>
      ))}
    </div>
  );
}
